package handlers

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/xid"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/schedule"
	"github.com/nqd-dev/nqd/scheduler"
	"github.com/nqd-dev/nqd/store"
)

// errNoScheduler answers the schedule routes of an API built without one.
var errNoScheduler = &nqd.Error{Code: nqd.CodeNotFound, Message: "This server has no scheduler."}

// flowScheduleBody is the body of POST /api/_flows/{name}/schedule, as
// Nuxt Queue v0.4 took it. Beside cron, nqd takes a schedule's timezone
// and policies.
type flowScheduleBody struct {
	Input    json.RawMessage `json:"input"`
	Cron     string          `json:"cron"`
	Delay    *int64          `json:"delay"`
	JobID    string          `json:"jobId"`
	Metadata json.RawMessage `json:"metadata"`
	schedule.Spec
}

// flowSchedule is a v0.4 flow schedule as its routes answer it.
type flowSchedule struct {
	ID        string         `json:"id"`
	FlowName  string         `json:"flowName"`
	Queue     string         `json:"queue"`
	Step      string         `json:"step"`
	Schedule  map[string]any `json:"schedule"`
	NextRun   string         `json:"nextRun,omitempty"`
	CreatedAt string         `json:"createdAt,omitempty"`
	RunCount  int            `json:"repeatCount"`
}

func (a *API) flowSchedule(name string, sc *scheduler.Schedule, queue, step string) flowSchedule {
	out := flowSchedule{ID: sc.Name(), FlowName: name, Queue: queue, Step: step, RunCount: sc.RunCount,
		Schedule: map[string]any{"cron": sc.Spec.Cron}, CreatedAt: isoMillis(sc.CreatedAt), NextRun: isoMillis(sc.NextRun)}
	if sc.Once {
		out.Schedule = map[string]any{"delay": int64(sc.Spec.Interval * 1000)}
	} else if sc.Spec.Timezone != "" {
		out.Schedule["timezone"] = sc.Spec.Timezone
	}
	return out
}

func isoMillis(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(event.TimeFormat)
}

// createFlowSchedule serves POST /api/_flows/{name}/schedule: a cron
// schedule that starts the flow with input.
func (a *API) createFlowSchedule(w http.ResponseWriter, r *http.Request) error {
	if a.scheduler == nil {
		return errNoScheduler
	}
	name, err := flowName(r)
	if err != nil {
		return err
	}
	var body flowScheduleBody
	if err := decodeStrict(http.MaxBytesReader(w, r.Body, a.limits.MaxBodyBytes), &body, ""); err != nil {
		return err
	}
	switch {
	case body.Delay != nil && body.Cron != "":
		return badRequest("Cannot specify both cron and delay")
	case body.Delay != nil && (*body.Delay <= 0 || time.Duration(*body.Delay)*time.Millisecond > schedule.MaxInterval):
		return invalidField("delay", "must be milliseconds from 1 to a year")
	case body.Cron == "" && body.Delay == nil:
		return badRequest("Must specify either cron or delay")
	}
	d, err := a.engine.Definition(r.Context(), name)
	if err != nil {
		return err
	}
	id := body.JobID
	if id == "" {
		id = "flow-" + xid.New().String()
	}
	if !event.ValidContextID(id) {
		return invalidField("jobId", event.ContextIDRule)
	}
	input := body.Input
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage(`{}`)
	}
	c, targets := store.Context{Type: scheduler.FlowStream, ID: id}, []scheduler.Target{{FlowName: name, Input: input}}
	var sc *scheduler.Schedule
	if body.Delay != nil {
		sc, err = a.scheduler.PutOnce(r.Context(), c, time.Duration(*body.Delay)*time.Millisecond, targets, body.Metadata)
	} else {
		spec := body.Spec
		spec.Cron = body.Cron
		sc, err = a.scheduler.Put(r.Context(), c, spec, targets, body.Metadata)
	}
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, a.flowSchedule(name, sc, d.Steps[d.Entry].Queue, d.Entry))
	return nil
}

// flowSchedules lists the v0.4 schedules that start flow name.
func (a *API) flowSchedules(r *http.Request, name string) ([]*scheduler.Schedule, error) {
	all, err := a.scheduler.List(r.Context(), scheduler.FlowStream)
	if err != nil {
		return nil, err
	}
	var out []*scheduler.Schedule
	for _, sc := range all {
		// A one-time schedule that fired is done, as a delayed job is.
		if len(sc.Targets) == 1 && sc.Targets[0].FlowName == name && !(sc.Once && sc.RunCount > 0) {
			out = append(out, sc)
		}
	}
	return out, nil
}

// listFlowSchedules serves GET /api/_flows/{name}/schedules.
func (a *API) listFlowSchedules(w http.ResponseWriter, r *http.Request) error {
	if a.scheduler == nil {
		return errNoScheduler
	}
	name, err := flowName(r)
	if err != nil {
		return err
	}
	d, err := a.engine.Definition(r.Context(), name)
	if err != nil {
		return err
	}
	scs, err := a.flowSchedules(r, name)
	if err != nil {
		return err
	}
	out := make([]flowSchedule, 0, len(scs))
	for _, sc := range scs {
		out = append(out, a.flowSchedule(name, sc, d.Steps[d.Entry].Queue, d.Entry))
	}
	writeJSON(w, r, http.StatusOK, out)
	return nil
}

// deleteFlowSchedule serves DELETE /api/_flows/{name}/schedules/{id}.
func (a *API) deleteFlowSchedule(w http.ResponseWriter, r *http.Request) error {
	if a.scheduler == nil {
		return errNoScheduler
	}
	name, err := flowName(r)
	if err != nil {
		return err
	}
	id := chi.URLParam(r, "id")
	if !event.ValidContextID(id) {
		return invalidField("id", event.ContextIDRule)
	}
	c := store.Context{Type: scheduler.FlowStream, ID: id}
	sc, err := a.scheduler.Get(r.Context(), c)
	if err != nil {
		return err
	}
	if len(sc.Targets) != 1 || sc.Targets[0].FlowName != name {
		return store.ErrNotFound
	}
	if err := a.scheduler.Delete(r.Context(), c); err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, map[string]any{"success": true, "message": "Schedule deleted successfully"})
	return nil
}

// scheduleID reads a schedule job's id: trigger:<name> for a schedule
// trigger, schedule:<id> for a v0.4 flow schedule, as GET
// /api/_scheduler/jobs names them.
func (a *API) scheduleID(r *http.Request) (store.Context, error) {
	if a.scheduler == nil {
		return store.Context{}, errNoScheduler
	}
	// A client may escape the colon; chi leaves an escaped path as it came.
	raw, err := url.PathUnescape(chi.URLParam(r, "id"))
	if err != nil {
		return store.Context{}, invalidField("id", "must be trigger:<name> or schedule:<id>")
	}
	typ, id, _ := strings.Cut(raw, ":")
	c := store.Context{Type: typ, ID: id}
	if (typ != scheduler.TriggerStream && typ != scheduler.FlowStream) || !c.Valid() {
		return c, invalidField("id", "must be trigger:<name> or schedule:<id>")
	}
	return c, nil
}

// previewSchedule serves GET /api/_scheduler/jobs/{id}/preview?count=n:
// the next n fire times as planned.
func (a *API) previewSchedule(w http.ResponseWriter, r *http.Request) error {
	c, err := a.scheduleID(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	if err := onlyParams(q, "count", "_t"); err != nil {
		return err
	}
	n, err := intParam(q, "count", 10, 1, 100)
	if err != nil {
		return err
	}
	times, err := a.scheduler.Preview(r.Context(), c, n)
	if err != nil {
		return err
	}
	out := make([]string, len(times))
	for i, t := range times {
		out[i] = t.UTC().Format(event.TimeFormat)
	}
	writeJSON(w, r, http.StatusOK, map[string]any{"id": c.String(), "nextRuns": out})
	return nil
}

// fireSchedule serves POST /api/_scheduler/jobs/{id}/fire: fire now.
func (a *API) fireSchedule(w http.ResponseWriter, r *http.Request) error {
	c, err := a.scheduleID(r)
	if err != nil {
		return err
	}
	at, err := a.scheduler.FireNow(r.Context(), c)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, map[string]any{"success": true, "id": c.String(), "firedAt": at.UTC().Format(event.TimeFormat)})
	return nil
}

// backfillBody is the body of POST /api/_scheduler/jobs/{id}/backfill.
type backfillBody struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// backfillSchedule serves POST /api/_scheduler/jobs/{id}/backfill: fire
// the due times of a past range that have not started their flows.
func (a *API) backfillSchedule(w http.ResponseWriter, r *http.Request) error {
	c, err := a.scheduleID(r)
	if err != nil {
		return err
	}
	var body backfillBody
	if err := decodeStrict(http.MaxBytesReader(w, r.Body, a.limits.MaxBodyBytes), &body, ""); err != nil {
		return err
	}
	if body.From.IsZero() || body.To.IsZero() || body.To.Before(body.From) {
		return invalidField("to", "give from and to as RFC 3339 times, from before to")
	}
	dues, err := a.scheduler.Backfill(r.Context(), c, body.From, body.To)
	if err != nil {
		return err
	}
	out := make([]string, len(dues))
	for i, d := range dues {
		out[i] = d.UTC().Format(event.TimeFormat)
	}
	writeJSON(w, r, http.StatusOK, map[string]any{"success": true, "id": c.String(), "fired": out})
	return nil
}

// scheduleView is a schedule as GET /api/_scheduler/schedules answers it.
type scheduleView struct {
	ID        string        `json:"id"`
	Kind      string        `json:"kind"` // trigger or schedule (a v0.4 flow schedule)
	Name      string        `json:"name"`
	Spec      schedule.Spec `json:"spec"`
	Flows     []string      `json:"flows"`
	Paused    bool          `json:"paused"`
	NextRun   string        `json:"nextRun,omitempty"`
	NextRuns  []string      `json:"nextRuns"`
	LastRun   string        `json:"lastRun,omitempty"`
	RunCount  int           `json:"runCount"`
	FailCount int           `json:"failCount"`
}

// scheduleNextRuns is how many fire times each listed schedule shows.
const scheduleNextRuns = 3

// listSchedules serves GET /api/_scheduler/schedules: every schedule,
// schedule triggers first, with its next fire times.
func (a *API) listSchedules(w http.ResponseWriter, r *http.Request) error {
	if a.scheduler == nil {
		return errNoScheduler
	}
	if err := onlyParams(r.URL.Query(), "_t"); err != nil {
		return err
	}
	out := []scheduleView{}
	for _, kind := range []string{scheduler.TriggerStream, scheduler.FlowStream} {
		scs, err := a.scheduler.List(r.Context(), kind)
		if err != nil {
			return err
		}
		for _, sc := range scs {
			v := scheduleView{ID: sc.Stream.String(), Kind: kind, Name: sc.Name(), Spec: sc.Spec, Flows: []string{}, Paused: sc.State.Paused,
				NextRun: isoMillis(sc.NextRun), NextRuns: []string{}, LastRun: isoMillis(sc.LastRun), RunCount: sc.RunCount, FailCount: sc.FailCount}
			for _, t := range sc.Targets {
				v.Flows = append(v.Flows, t.FlowName)
			}
			if !sc.State.Paused {
				times, err := a.scheduler.Preview(r.Context(), sc.Stream, scheduleNextRuns)
				if err != nil {
					return err
				}
				for _, t := range times {
					v.NextRuns = append(v.NextRuns, t.UTC().Format(event.TimeFormat))
				}
			}
			out = append(out, v)
		}
	}
	writeJSON(w, r, http.StatusOK, map[string]any{"schedules": out})
	return nil
}

// errTriggerPause refuses to pause a schedule trigger's schedule by itself:
// the registry's status decides it, and the scheduler keeps it in step.
var errTriggerPause = &nqd.Error{Code: nqd.CodeConflict,
	Message: "A schedule trigger is paused and resumed with its status: PATCH /api/_triggers/{name} with status inactive or active."}

// pauseSchedule serves POST /api/_scheduler/jobs/{id}/pause and /resume of
// a v0.4 flow schedule. A resumed schedule goes on with its first due time
// after now.
func (a *API) pauseSchedule(paused bool) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		c, err := a.scheduleID(r)
		if err != nil {
			return err
		}
		if c.Type == scheduler.TriggerStream {
			return errTriggerPause
		}
		sc, err := a.scheduler.SetPaused(r.Context(), c, paused)
		if err != nil {
			return err
		}
		out := map[string]any{"success": true, "id": c.String(), "paused": sc.State.Paused}
		if sc.NextRun > 0 {
			out["nextRun"] = isoMillis(sc.NextRun)
		}
		writeJSON(w, r, http.StatusOK, out)
		return nil
	}
}
