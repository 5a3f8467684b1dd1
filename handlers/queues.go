package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/store"
)

// Queues are the flow engine's queue views behind the era A queue routes
// (openapi.yaml, tag queues); see engine.Engine.
type Queues interface {
	QueueNames(ctx context.Context) ([]string, error)
	Queue(ctx context.Context, name string) (engine.Queue, error)
	QueueJobs(ctx context.Context, name string, states []string, offset, limit int) (engine.JobPage, error)
	QueueJob(ctx context.Context, queue, id string) (engine.QueueJob, error)
	JobLogs(ctx context.Context, queue, id string, after event.ID, limit int) ([]event.Event, event.ID, error)
	SetQueuePaused(ctx context.Context, name string, paused bool) error
	AddJob(ctx context.Context, queue, flow string, data json.RawMessage) (engine.Started, error)
	Definitions(ctx context.Context) ([]*flows.Definition, error)
}

// Paging of the queue routes. Finished jobs are read from the run index by
// merging each flow's newest runs, so the offset is bounded too.
const (
	defaultJobLimit = 50
	maxJobLimit     = 500
	maxJobOffset    = 10000
	defaultLogLimit = 200
	maxLogLimit     = 1000
)

// queueRoutes mounts the era A queue routes.
func (a *API) queueRoutes(r chi.Router) {
	read, write, admin := r.With(a.require(auth.Read)), r.With(a.require(auth.Write)), r.With(a.require(auth.Admin))
	read.Get("/api/_queues", a.listQueues)
	read.Get("/api/_queues/metrics", a.allQueueMetrics)
	read.Get("/api/_queues/{queue}", a.getQueue)
	read.Get("/api/_queues/{queue}/metrics", a.queueMetrics)
	admin.Post("/api/_queues/{queue}/pause", a.pauseQueue(true))
	admin.Post("/api/_queues/{queue}/resume", a.pauseQueue(false))
	read.Get("/api/_queues/{queue}/job", a.listJobs)
	write.With(a.limitRate).Post("/api/_queues/{queue}/job", a.addJob)
	read.Get("/api/_queues/{queue}/job/{jobId}", a.getJob)
	read.Get("/api/_queues/{queue}/job/{jobId}/logs", a.jobLogs)
}

type queueItem struct {
	Name string `json:"name"`
}

type countsBody struct {
	Waiting   int64 `json:"waiting"`
	Active    int64 `json:"active"`
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
	Delayed   int64 `json:"delayed"`
	Paused    int64 `json:"paused"`
}

func toCounts(c engine.QueueCounts) countsBody {
	return countsBody{Waiting: c.Waiting, Active: c.Active, Completed: c.Completed, Failed: c.Failed, Delayed: c.Delayed, Paused: c.Paused}
}

type metricsItem struct {
	Counts countsBody `json:"counts"`
	Paused bool       `json:"paused"`
}

type queueMetricsBody struct {
	Name   string     `json:"name"`
	Counts countsBody `json:"counts"`
	Paused bool       `json:"paused"`
}

// jobBody is a job in the shape of the UI's jobs table (BullMQ's names),
// plus nqd's own fields. The lease is the worker's credential and never
// shown.
type jobBody struct {
	ID           string          `json:"id"`
	Name         string          `json:"name"` // the step
	Data         json.RawMessage `json:"data"` // the input; null once finished
	State        string          `json:"state"`
	Timestamp    int64           `json:"timestamp,omitempty"`
	ProcessedOn  int64           `json:"processedOn,omitempty"`
	FinishedOn   int64           `json:"finishedOn,omitempty"`
	AttemptsMade int             `json:"attemptsMade"`
	Queue        string          `json:"queue"`
	FlowName     string          `json:"flowName"`
	RunID        string          `json:"runId"`
	Step         string          `json:"step"`
}

func toJob(j engine.QueueJob) jobBody {
	return jobBody{
		ID: j.ID, Name: j.Step, Data: j.Input, State: j.State,
		Timestamp: j.CreatedAt, ProcessedOn: j.ProcessedAt, FinishedOn: j.FinishedAt,
		AttemptsMade: j.Attempt, Queue: j.Queue, FlowName: j.Flow, RunID: j.Run, Step: j.Step,
	}
}

type jobsBody struct {
	Jobs   []jobBody `json:"jobs"`
	Total  int64     `json:"total"`
	Offset int       `json:"offset"`
	Limit  int       `json:"limit"`
}

type logsBody struct {
	Items      []event.Event `json:"items"`
	NextFromID string        `json:"nextFromId,omitempty"`
}

type addJobBody struct {
	Name    string          `json:"name"`
	Data    json.RawMessage `json:"data"`
	Opts    json.RawMessage `json:"opts"`
	Options json.RawMessage `json:"options"`
}

type addedJob struct {
	ID       string `json:"id"`
	RunID    string `json:"runId"`
	FlowName string `json:"flowName"`
	Queue    string `json:"queue"`
	Step     string `json:"step"`
}

func queueParam(r *http.Request) (string, error) {
	name := chi.URLParam(r, "queue")
	if !event.ValidName(name) {
		return "", invalidField("queue", "must match ^[A-Za-z0-9][A-Za-z0-9._~-]{0,127}$")
	}
	return name, nil
}

func jobIDParam(r *http.Request) (string, error) {
	id := chi.URLParam(r, "jobId")
	run, step, ok := strings.Cut(id, ":")
	if !ok || !event.ValidName(run) || !event.ValidName(step) {
		return "", invalidField("jobId", "must be <runId>:<step>")
	}
	return id, nil
}

func (a *API) listQueues(w http.ResponseWriter, r *http.Request) {
	names, err := a.queues.QueueNames(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := make([]queueItem, 0, len(names))
	for _, n := range names {
		out = append(out, queueItem{Name: n})
	}
	writeJSON(w, r, http.StatusOK, out)
}

func (a *API) allQueueMetrics(w http.ResponseWriter, r *http.Request) {
	names, err := a.queues.QueueNames(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := make(map[string]metricsItem, len(names))
	for _, n := range names {
		q, err := a.queues.Queue(r.Context(), n)
		if err != nil {
			writeError(w, r, err)
			return
		}
		out[n] = metricsItem{Counts: toCounts(q.Counts), Paused: q.Paused}
	}
	writeJSON(w, r, http.StatusOK, out)
}

// queue reads the route's queue, answering the error itself.
func (a *API) queue(w http.ResponseWriter, r *http.Request) (engine.Queue, bool) {
	name, err := queueParam(r)
	if err != nil {
		writeError(w, r, err)
		return engine.Queue{}, false
	}
	q, err := a.queues.Queue(r.Context(), name)
	if err != nil {
		writeError(w, r, err)
		return engine.Queue{}, false
	}
	return q, true
}

func (a *API) getQueue(w http.ResponseWriter, r *http.Request) {
	if q, ok := a.queue(w, r); ok {
		writeJSON(w, r, http.StatusOK, queueItem{Name: q.Name})
	}
}

func (a *API) queueMetrics(w http.ResponseWriter, r *http.Request) {
	if q, ok := a.queue(w, r); ok {
		writeJSON(w, r, http.StatusOK, queueMetricsBody{Name: q.Name, Counts: toCounts(q.Counts), Paused: q.Paused})
	}
}

// pauseQueue pauses or resumes any valid queue name, known or not, so that
// a queue can be paused before its flow is stored.
func (a *API) pauseQueue(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, err := queueParam(r)
		if err != nil {
			writeError(w, r, err)
			return
		}
		if err := a.queues.SetQueuePaused(r.Context(), name, paused); err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, r, http.StatusOK, map[string]bool{"ok": true})
	}
}

func (a *API) listJobs(w http.ResponseWriter, r *http.Request) {
	name, err := queueParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	limit, err := intParam(q, "limit", defaultJobLimit, 1, maxJobLimit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	offset, err := intParam(q, "offset", 0, 0, maxJobOffset)
	if err != nil {
		writeError(w, r, err)
		return
	}
	states := engine.JobStates
	if s := q.Get("state"); s != "" {
		states = strings.Split(s, ",")
		for _, st := range states {
			if !slices.Contains(engine.JobStates, st) {
				writeError(w, r, invalidField("state", "must be a comma-separated list of "+strings.Join(engine.JobStates, ", ")))
				return
			}
		}
	}
	page, err := a.queues.QueueJobs(r.Context(), name, states, offset, limit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	body := jobsBody{Jobs: make([]jobBody, 0, len(page.Jobs)), Total: page.Total, Offset: offset, Limit: limit}
	for _, j := range page.Jobs {
		body.Jobs = append(body.Jobs, toJob(j))
	}
	writeJSON(w, r, http.StatusOK, body)
}

func (a *API) getJob(w http.ResponseWriter, r *http.Request) {
	name, err := queueParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	id, err := jobIDParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	j, err := a.queues.QueueJob(r.Context(), name, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, toJob(j))
}

func (a *API) jobLogs(w http.ResponseWriter, r *http.Request) {
	name, err := queueParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	id, err := jobIDParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	limit, err := intParam(q, "limit", defaultLogLimit, 1, maxLogLimit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	after, err := idParam(q, "fromId")
	if err != nil {
		writeError(w, r, err)
		return
	}
	logs, next, err := a.queues.JobLogs(r.Context(), name, id, after, limit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	body := logsBody{Items: logs}
	if !next.IsZero() {
		body.NextFromID = next.String()
	}
	writeJSON(w, r, http.StatusOK, body)
}

// addJob adds a job the one way nqd has: by starting a run of the flow the
// body names, whose entry step must run on this queue.
func (a *API) addJob(w http.ResponseWriter, r *http.Request) {
	name, err := queueParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := checkJSONContent(r); err != nil {
		writeError(w, r, err)
		return
	}
	var body addJobBody
	if err := decodeStrict(http.MaxBytesReader(w, r.Body, a.limits.MaxBodyBytes), &body, ""); err != nil {
		writeError(w, r, err)
		return
	}
	if opts := nonNull(body.Opts); opts != nil && !bytes.Equal(opts, []byte("{}")) {
		writeError(w, r, noJobOptions("opts"))
		return
	}
	if opts := nonNull(body.Options); opts != nil && !bytes.Equal(opts, []byte("{}")) {
		writeError(w, r, noJobOptions("options"))
		return
	}
	input, ok := jobInput(body.Data)
	if !ok {
		writeError(w, r, invalidField("data", "must be a JSON object (or a string holding one), the run's input"))
		return
	}
	if !event.ValidName(body.Name) {
		writeError(w, r, a.notEntryFlow(r.Context(), name))
		return
	}
	s, err := a.queues.AddJob(r.Context(), name, body.Name, input)
	if errors.Is(err, engine.ErrNotEntryQueue) || errors.Is(err, store.ErrNotFound) {
		writeError(w, r, a.notEntryFlow(r.Context(), name))
		return
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, addedJob{ID: s.ID, RunID: s.FlowID, FlowName: body.Name, Queue: s.Queue, Step: s.Step})
}

// jobInput is the run's input a job's data gives: an object, or a string
// holding one (the era A job page sends its data stringified).
func jobInput(data json.RawMessage) (json.RawMessage, bool) {
	data = nonNull(data)
	if data == nil {
		return json.RawMessage(`{}`), true
	}
	var s string
	if json.Unmarshal(data, &s) == nil {
		data = json.RawMessage(s)
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil || obj == nil {
		return nil, false
	}
	return data, true
}

func noJobOptions(field string) *nqd.Error {
	return &nqd.Error{Code: nqd.CodeUnprocessable,
		Message: "nqd takes no job options: a step's retries, backoff and delays come from its flow definition.",
		Fields:  map[string]string{field: "must be absent"}}
}

// notEntryFlow explains which flows can take a job on queue.
func (a *API) notEntryFlow(ctx context.Context, queue string) error {
	defs, err := a.queues.Definitions(ctx)
	if err != nil {
		return err
	}
	var names []string
	for _, d := range defs {
		if d.Steps[d.Entry].Queue == queue {
			names = append(names, d.Name)
		}
	}
	slices.Sort(names)
	rule := "must name a flow whose entry step runs on queue " + queue + ": "
	if len(names) == 0 {
		rule += "no stored flow starts on it"
	} else {
		rule += strings.Join(names, ", ")
	}
	return &nqd.Error{Code: nqd.CodeUnprocessable,
		Message: "A job is added to a queue by starting a run of a flow whose entry step runs on it.",
		Fields:  map[string]string{"name": rule}}
}
