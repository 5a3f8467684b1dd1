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
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/registry"
	"github.com/nqd-dev/nqd/store"
)

// Paging of the queue routes. Finished jobs are read from the run index by
// merging each flow's newest runs, so the offset is bounded too.
const (
	defaultJobLimit = 50
	maxJobLimit     = 500
	maxJobOffset    = 10000
	defaultLogLimit = 200
	maxLogLimit     = 1000
)

type queueItem struct {
	Name string `json:"name"`
}

// queueListItem is a queue in GET /api/_queues: its name, which the v0.3 UI
// reads, and its counts, pause state and config, which the v0.5 UI reads.
type queueListItem struct {
	Name     string      `json:"name"`
	Counts   countsBody  `json:"counts"`
	IsPaused bool        `json:"isPaused"`
	Config   queueConfig `json:"config"`
	served
}

// served is nqd's own addition to a queue's counts: how many connected
// workers serve it, and whether jobs wait with none to take them.
type served struct {
	Workers  int  `json:"workers"`
	Unserved bool `json:"unserved"`
}

// servedBy is what workers (nil when nqd keeps no registry) say of queue.
func servedBy(workers map[string]int, queue string, c engine.QueueCounts) served {
	n := workers[queue]
	return served{Workers: n, Unserved: workers != nil && n == 0 && c.Waiting > 0}
}

// queueWorkers counts the connected workers of each queue, from the worker
// registry's stream; nil without a state reader.
func (a *API) queueWorkers(ctx context.Context) (map[string]int, error) {
	if a.state == nil {
		return nil, nil
	}
	s, err := registry.State(ctx, a.state, event.MaxID)
	if err != nil {
		return nil, err
	}
	return s.QueueWorkers(a.now().Add(-a.staleAfter())), nil
}

// queueConfig is BullMQ's queue and worker options as the v0.5 UI shows
// them. nqd's queues have none of their own (retries and timeouts are the
// flow's, concurrency the worker's), so only the names are given.
type queueConfig struct {
	Queue  queueOptions `json:"queue"`
	Worker struct{}     `json:"worker"`
}

type queueOptions struct {
	Name   string `json:"name"`
	Prefix string `json:"prefix"`
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
	served
}

type queueMetricsBody struct {
	Name   string     `json:"name"`
	Counts countsBody `json:"counts"`
	Paused bool       `json:"paused"`
	served
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
		AttemptsMade: j.Attempt, Queue: j.Queue, FlowName: j.FlowName, RunID: j.RunID, Step: j.Step,
	}
}

type jobsBody struct {
	Jobs   []jobBody `json:"jobs"`
	Total  int64     `json:"total"`
	Offset int       `json:"offset"`
	Limit  int       `json:"limit"`
	// Count and HasMore are what the v0.5 UI pages by.
	Count   int  `json:"count"`
	HasMore bool `json:"hasMore"`
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
		return "", invalidField("queue", event.NameRule)
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

func (a *API) listQueues(w http.ResponseWriter, r *http.Request) error {
	names, err := a.engine.QueueNames(r.Context())
	if err != nil {
		return err
	}
	workers, err := a.queueWorkers(r.Context())
	if err != nil {
		return err
	}
	out := make([]queueListItem, 0, len(names))
	for _, n := range names {
		q, err := a.engine.Queue(r.Context(), n)
		if errors.Is(err, store.ErrNotFound) {
			continue // its last job went between the two reads
		}
		if err != nil {
			return err
		}
		out = append(out, queueListItem{Name: n, Counts: toCounts(q.Counts), IsPaused: q.Paused,
			Config: queueConfig{Queue: queueOptions{Name: n, Prefix: a.keyPrefix}}, served: servedBy(workers, n, q.Counts)})
	}
	writeJSON(w, r, http.StatusOK, out)
	return nil
}

func (a *API) allQueueMetrics(w http.ResponseWriter, r *http.Request) error {
	names, err := a.engine.QueueNames(r.Context())
	if err != nil {
		return err
	}
	workers, err := a.queueWorkers(r.Context())
	if err != nil {
		return err
	}
	out := make(map[string]metricsItem, len(names))
	for _, n := range names {
		q, err := a.engine.Queue(r.Context(), n)
		if err != nil {
			return err
		}
		out[n] = metricsItem{Counts: toCounts(q.Counts), Paused: q.Paused, served: servedBy(workers, n, q.Counts)}
	}
	writeJSON(w, r, http.StatusOK, out)
	return nil
}

// queue reads the route's queue.
func (a *API) queue(r *http.Request) (engine.Queue, error) {
	name, err := queueParam(r)
	if err != nil {
		return engine.Queue{}, err
	}
	return a.engine.Queue(r.Context(), name)
}

func (a *API) getQueue(w http.ResponseWriter, r *http.Request) error {
	q, err := a.queue(r)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, queueItem{Name: q.Name})
	return nil
}

func (a *API) queueMetrics(w http.ResponseWriter, r *http.Request) error {
	q, err := a.queue(r)
	if err != nil {
		return err
	}
	workers, err := a.queueWorkers(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, queueMetricsBody{Name: q.Name, Counts: toCounts(q.Counts), Paused: q.Paused,
		served: servedBy(workers, q.Name, q.Counts)})
	return nil
}

// pauseQueue pauses or resumes any valid queue name, known or not, so that
// a queue can be paused before its flow is stored.
func (a *API) pauseQueue(paused bool) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		name, err := queueParam(r)
		if err != nil {
			return err
		}
		if err := a.engine.SetQueuePaused(r.Context(), name, paused); err != nil {
			return err
		}
		writeJSON(w, r, http.StatusOK, map[string]bool{"ok": true})
		return nil
	}
}

func (a *API) listJobs(w http.ResponseWriter, r *http.Request) error {
	name, err := queueParam(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit, err := intParam(q, "limit", defaultJobLimit, 1, maxJobLimit)
	if err != nil {
		return err
	}
	offset, err := intParam(q, "offset", 0, 0, maxJobOffset)
	if err != nil {
		return err
	}
	states := engine.JobStates
	if s := q.Get("state"); s != "" {
		states = strings.Split(s, ",")
		for _, st := range states {
			if !slices.Contains(engine.JobStates, st) {
				return invalidField("state", "must be a comma-separated list of "+strings.Join(engine.JobStates, ", "))
			}
		}
	}
	page, err := a.engine.QueueJobs(r.Context(), name, states, offset, limit)
	if err != nil {
		return err
	}
	body := jobsBody{Jobs: make([]jobBody, 0, len(page.Jobs)), Total: page.Total, Offset: offset, Limit: limit}
	for _, j := range page.Jobs {
		body.Jobs = append(body.Jobs, toJob(j))
	}
	// offset and limit count what total counts (jobs, or finished runs),
	// not always the jobs of the page.
	body.Count, body.HasMore = len(body.Jobs), int64(offset+limit) < page.Total
	writeJSON(w, r, http.StatusOK, body)
	return nil
}

func (a *API) getJob(w http.ResponseWriter, r *http.Request) error {
	name, err := queueParam(r)
	if err != nil {
		return err
	}
	id, err := jobIDParam(r)
	if err != nil {
		return err
	}
	j, err := a.engine.QueueJob(r.Context(), name, id)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, toJob(j))
	return nil
}

func (a *API) jobLogs(w http.ResponseWriter, r *http.Request) error {
	name, err := queueParam(r)
	if err != nil {
		return err
	}
	id, err := jobIDParam(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit, err := intParam(q, "limit", defaultLogLimit, 1, maxLogLimit)
	if err != nil {
		return err
	}
	after, err := idParam(q, "fromId")
	if err != nil {
		return err
	}
	logs, next, err := a.engine.JobLogs(r.Context(), name, id, after, limit)
	if err != nil {
		return err
	}
	body := logsBody{Items: logs}
	if !next.IsZero() {
		body.NextFromID = next.String()
	}
	writeJSON(w, r, http.StatusOK, body)
	return nil
}

// addJob adds a job the one way nqd has: by starting a run of the flow the
// body names, whose entry step must run on this queue.
func (a *API) addJob(w http.ResponseWriter, r *http.Request) error {
	name, err := queueParam(r)
	if err != nil {
		return err
	}
	if err := checkJSONContent(r); err != nil {
		return err
	}
	var body addJobBody
	if err := decodeStrict(http.MaxBytesReader(w, r.Body, a.limits.MaxBodyBytes), &body, ""); err != nil {
		return err
	}
	if opts := nonNull(body.Opts); opts != nil && !bytes.Equal(opts, []byte("{}")) {
		return noJobOptions("opts")
	}
	if opts := nonNull(body.Options); opts != nil && !bytes.Equal(opts, []byte("{}")) {
		return noJobOptions("options")
	}
	input, ok := jobInput(body.Data)
	if !ok {
		return invalidField("data", "must be a JSON object (or a string holding one), the run's input")
	}
	if !event.ValidName(body.Name) {
		return a.notEntryFlow(r.Context(), name)
	}
	s, err := a.engine.AddJob(r.Context(), name, body.Name, input)
	if errors.Is(err, engine.ErrNotEntryQueue) || errors.Is(err, store.ErrNotFound) {
		return a.notEntryFlow(r.Context(), name)
	}
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, addedJob{ID: s.ID, RunID: s.FlowID, FlowName: body.Name, Queue: s.Queue, Step: s.Step})
	return nil
}

// jobInput is the run's input a job's data gives: an object, or a string
// holding one (the v0.3 UI's job page sends its data stringified).
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
	defs, err := a.engine.Definitions(ctx)
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
