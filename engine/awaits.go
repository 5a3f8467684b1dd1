package engine

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/store"
)

// This file is the awaits feature: a step that declares an await (a time, an
// event or a trigger to wait for, as await_approval in
// examples/flows/example-flow.yaml does) is not queued when it is due; the
// engine registers the await in the run's record and queues the step once the
// await resolves. The run record is the continuation: the await, the input to
// run the step with and, once a trigger fired, the answer a replayed POST
// gets. Every resolution is one versioned UpdateRun, so of any number of
// concurrent resolutions (trigger POSTs, timers on several instances) exactly
// one wins.

// Errors of the trigger endpoint beyond the store's sentinels.
var (
	// ErrTriggerInvalid: the trigger id is not one this server signed.
	ErrTriggerInvalid error = &nqd.Error{Code: nqd.CodeUnauthorized, Message: "The trigger id is not valid.", Err: auth.ErrInvalidToken}
	// ErrTriggerGone: the trigger expired, was canceled or timed out.
	ErrTriggerGone error = &nqd.Error{Code: nqd.CodeGone, Message: "The trigger expired, was canceled or its run ended."}
	// ErrPayloadInvalid: the payload breaks the trigger's schema.
	ErrPayloadInvalid = fmt.Errorf("engine: payload does not match the trigger's schema: %w", store.ErrInvalid)
)

// Timer kinds beside "retry".
const (
	timerAwait   = "await"   // a time await's resume time
	timerTimeout = "timeout" // any await's deadline
	timerEvent   = "event"   // an event await's next look for its event
)

// Await statuses in the run record.
const (
	awaitWaiting   = "waiting"
	awaitResumed   = "resumed"
	awaitTimeout   = "timeout"
	awaitCancelled = "cancelled"
)

// Step statuses of the awaits feature: an awaiting step has a pending
// await, a timed-out one ended by its await's deadline.
const (
	stepAwaiting = "awaiting"
	stepTimedOut = "timeout"
)

// awaitState is one await of a run, keyed by its id in runState.Awaits.
type awaitState struct {
	Type         string          `json:"type"`
	Step         string          `json:"step"`
	Status       string          `json:"status"`
	RegisteredAt int64           `json:"registeredAt"`
	ResumeAt     int64           `json:"resumeAt,omitempty"` // time awaits
	Deadline     int64           `json:"deadline,omitempty"` // 0: none
	EventKind    string          `json:"eventKind,omitempty"`
	Where        string          `json:"where,omitempty"`
	TriggerType  string          `json:"triggerType,omitempty"`
	Input        json.RawMessage `json:"input,omitempty"` // the step's input, resumed with
	// Outcome is the first trigger POST's answer, given again to replays.
	Outcome json.RawMessage `json:"outcome,omitempty"`
}

// effects are what one decision writes beside the run record.
type effects struct {
	events []event.Event
	jobs   []store.Job
	timers []store.Timer
	// triggers are trigger.registered events to append, each to its own
	// stream, before the decision is committed.
	triggers []event.Event
}

func (fx *effects) into(u *store.RunUpdate) {
	u.Events = append(u.Events, fx.events...)
	u.Enqueue = append(u.Enqueue, fx.jobs...)
	u.SetTimers = append(u.SetTimers, fx.timers...)
}

// plan queues step of r with input, or registers its await when it
// declares one. now must be the same on every retry of the decision, so
// that a trigger id it issues names the same trigger each time.
func (e *Engine) plan(r *run, d *flows.Definition, step string, input json.RawMessage, now int64, fx *effects) {
	s := d.Steps[step]
	if s.Await == nil {
		r.state.Steps[step] = &stepState{Status: stepQueued, Attempt: 1, Queue: s.Queue}
		fx.jobs = append(fx.jobs, store.Job{
			ID: store.JobID(r.meta.RunID, step), Queue: s.Queue, FlowName: r.meta.FlowName, RunID: r.meta.RunID,
			Step: step, Input: input, Attempt: 1, ReadyAt: now,
		})
		return
	}
	a := s.Await
	aw := &awaitState{Type: a.Type, Step: step, Status: awaitWaiting, RegisteredAt: now, Input: input}
	if a.Timeout > 0 {
		aw.Deadline = now + a.Timeout
	}
	seq := strconv.Itoa(len(r.state.Awaits))
	id := awaitID(r.meta.RunID, step, seq)
	var data map[string]any
	switch a.Type {
	case "time":
		aw.ResumeAt = now + a.Delay
		fx.timers = append(fx.timers, store.Timer{Kind: timerAwait, FlowName: r.meta.FlowName, RunID: r.meta.RunID, Step: step, Due: aw.ResumeAt})
		data = map[string]any{"resumeAt": isoMS(aw.ResumeAt), "reason": "step await"}
	case "event":
		aw.EventKind, aw.Where = a.EventKind, a.Where
		fx.timers = append(fx.timers, store.Timer{Kind: timerEvent, FlowName: r.meta.FlowName, RunID: r.meta.RunID, Step: step, Due: now})
		data = map[string]any{"eventKind": a.EventKind}
		if a.Where != "" {
			data["condition"] = a.Where
		}
	case "trigger":
		if aw.Deadline == 0 {
			aw.Deadline = now + e.opts.TriggerMaxAge.Milliseconds()
		}
		aw.TriggerType = a.TriggerType
		if aw.TriggerType == "" {
			aw.TriggerType = "webhook"
		}
		id = e.opts.Triggers.Issue(r.meta.RunID+"\x00"+step+"\x00"+seq, time.UnixMilli(aw.Deadline))
		data = map[string]any{"triggerId": id, "triggerType": aw.TriggerType}
		cfg := map[string]any{"flowName": r.meta.FlowName, "runId": r.meta.RunID, "step": step, "expiresAt": isoMS(aw.Deadline)}
		if len(a.Schema) > 0 {
			cfg["schema"] = a.Schema
		}
		fx.triggers = append(fx.triggers, event.Event{
			Kind: "trigger.registered", Subject: id, Trigger: id, RunID: r.meta.RunID, FlowName: r.meta.FlowName, Step: step,
			CorrelationID: r.meta.RunID, Data: mustJSON(map[string]any{"type": aw.TriggerType, "config": cfg}),
		})
	}
	if a.Timeout > 0 {
		data["timeout"] = a.Timeout
	}
	if aw.Deadline > 0 {
		fx.timers = append(fx.timers, store.Timer{Kind: timerTimeout, FlowName: r.meta.FlowName, RunID: r.meta.RunID, Step: step, Due: aw.Deadline})
	}
	if r.state.Awaits == nil {
		r.state.Awaits = map[string]*awaitState{}
	}
	r.state.Awaits[id] = aw
	r.state.Steps[step] = &stepState{Status: stepAwaiting, Queue: s.Queue, Await: id}
	fx.events = append(fx.events, flowEvent(r, "step.await."+a.Type, step, data))
}

// awaitID names a time or event await; trigger awaits are named by their
// signed trigger id.
func awaitID(run, step, seq string) string {
	sum := sha256.Sum256([]byte(run + "\x00" + step + "\x00" + seq))
	return "aw-" + hex.EncodeToString(sum[:12])
}

// register appends each trigger.registered of fx to its trigger's stream.
// It runs before the decision is committed, so a trigger the run names can
// always be found; the idempotency key makes a retried decision register
// it once.
func (e *Engine) register(ctx context.Context, fx *effects) error {
	for _, ev := range fx.triggers {
		_, err := e.st.Append(ctx, store.Context{Type: "trigger", ID: ev.Trigger}, []event.Event{ev}, store.AppendOptions{IdempotencyKey: "registered"})
		if err != nil {
			return err
		}
	}
	return nil
}

// settle sets r's status from its steps: awaiting when every step still
// going waits on an await.
func (r *run) settle() {
	if r.ended() {
		return
	}
	moving, waiting := false, false
	for _, s := range r.state.Steps {
		switch s.Status {
		case stepQueued, stepRetrying:
			moving = true
		case stepAwaiting:
			waiting = true
		}
	}
	r.meta.Status = store.RunRunning
	if waiting && !moving {
		r.meta.Status = store.RunAwaiting
	}
}

// withResume adds the await's resolution to a step's input as `_resume`,
// when the input is an object, so the step sees how its wait ended.
func withResume(input json.RawMessage, resume map[string]any) json.RawMessage {
	var m map[string]json.RawMessage
	if len(input) == 0 {
		m = map[string]json.RawMessage{}
	} else if err := json.Unmarshal(input, &m); err != nil || m == nil {
		return input
	}
	m["_resume"] = mustJSON(resume)
	return mustJSON(m)
}

// resume resolves await id of r: step.resumed, and the step queued with the
// resolution in its input.
func (e *Engine) resume(r *run, id string, reason string, resolution map[string]any, now int64) store.RunUpdate {
	aw := r.state.Awaits[id]
	aw.Status = awaitResumed
	s := r.state.Steps[aw.Step]
	s.Status, s.Attempt, s.Await = stepQueued, 1, ""
	r.settle()
	resolution["awaitType"] = aw.Type
	ev := flowEvent(r, "step.resumed", aw.Step, map[string]any{"reason": reason, "awaitDuration": now - aw.RegisteredAt})
	ev.Meta = mustJSON(map[string]any{"awaitType": aw.Type})
	u, _ := r.update()
	u.Events = []event.Event{ev}
	u.Enqueue = []store.Job{{
		ID: store.JobID(r.meta.RunID, aw.Step), Queue: s.Queue, FlowName: r.meta.FlowName, RunID: r.meta.RunID, Step: aw.Step,
		Input: withResume(aw.Input, resolution), Attempt: 1, ReadyAt: now,
	}}
	u.ClearTimers = awaitTimers(r, aw.Step)
	return u
}

func awaitTimers(r *run, step string) []store.Timer {
	return []store.Timer{
		{Kind: timerAwait, FlowName: r.meta.FlowName, RunID: r.meta.RunID, Step: step},
		{Kind: timerTimeout, FlowName: r.meta.FlowName, RunID: r.meta.RunID, Step: step},
		{Kind: timerEvent, FlowName: r.meta.FlowName, RunID: r.meta.RunID, Step: step},
	}
}

// pendingAwait returns the waiting await of step, if any.
func (r *run) pendingAwait(step string) (string, *awaitState) {
	s := r.state.Steps[step]
	if s == nil || s.Status != stepAwaiting {
		return "", nil
	}
	aw := r.state.Awaits[s.Await]
	if aw == nil || aw.Status != awaitWaiting {
		return "", nil
	}
	return s.Await, aw
}

// fireAwaitTimer handles a due "await" or "timeout" timer: a time await
// resumes, any other await past its deadline times out.
func (e *Engine) fireAwaitTimer(ctx context.Context, t store.Timer) error {
	d, err := e.Definition(ctx, t.FlowName)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	now := e.nowMS()
	var gone []string
	var waited int64
	err = e.retry(ctx, func() error {
		gone = nil
		r, err := e.readRun(ctx, t.FlowName, t.RunID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		id, aw := r.pendingAwait(t.Step)
		var u store.RunUpdate
		switch {
		case aw == nil || r.ended() || d == nil:
			u, err = r.update()
		case t.Kind == timerAwait && aw.Type == "time":
			u = e.resume(r, id, "Time reached", map[string]any{"resumeAt": isoMS(aw.ResumeAt)}, now)
		case t.Kind == timerTimeout:
			var fx effects
			u, err = e.timeout(r, d, id, now, &fx)
			if err == nil && aw.Type == "trigger" {
				gone, waited = []string{id}, now-aw.RegisteredAt
			}
			if err == nil {
				err = e.register(ctx, &fx)
			}
		default:
			u, err = r.update()
		}
		if err != nil {
			return err
		}
		u.ClearTimers = append(u.ClearTimers, t)
		_, err = e.commit(ctx, r, u)
		return err
	})
	if err != nil {
		return err
	}
	for _, id := range gone {
		e.closeTrigger(ctx, id, "trigger.timeout", "timeout", map[string]any{"duration": waited})
	}
	return nil
}

// timeout ends await id of r at its deadline: step.await.timeout, then the
// step's onTimeout step, or the step and the run fail.
func (e *Engine) timeout(r *run, d *flows.Definition, id string, now int64, fx *effects) (store.RunUpdate, error) {
	aw := r.state.Awaits[id]
	aw.Status = awaitTimeout
	s := r.state.Steps[aw.Step]
	s.Status, s.Await = stepTimedOut, ""
	fx.events = append(fx.events, flowEvent(r, "step.await.timeout", aw.Step, map[string]any{
		"awaitType": aw.Type, "duration": now - aw.RegisteredAt,
	}))
	var a *flows.Await
	if st, ok := d.Steps[aw.Step]; ok {
		a = st.Await
	}
	if a != nil && a.OnTimeout != "" {
		if _, fired := r.state.Steps[a.OnTimeout]; !fired {
			in := withResume(aw.Input, map[string]any{"awaitType": aw.Type, "timedOut": true, "step": aw.Step})
			e.plan(r, d, a.OnTimeout, in, now, fx)
		}
	}
	var u store.RunUpdate
	var err error
	if !r.anyActive() && (a == nil || a.OnTimeout == "") {
		u, err = e.end(r, store.RunFailed, now)
		fx.events = append(fx.events, flowEvent(r, "flow.failed", "", map[string]any{
			"error": fmt.Sprintf("step %s: await timed out", aw.Step), "duration": now - r.meta.StartedAt,
		}))
	} else if !r.anyActive() {
		u, err = e.end(r, store.RunCompleted, now)
		fx.events = append(fx.events, flowEvent(r, "flow.completed", "", map[string]any{"duration": now - r.meta.StartedAt}))
	} else {
		r.settle()
		u, err = r.update()
	}
	if err != nil {
		return u, err
	}
	u.ClearTimers = append(u.ClearTimers, awaitTimers(r, aw.Step)...)
	fx.into(&u)
	return u, nil
}

// closeTrigger appends a trigger's last event (timeout or cancel) to its
// stream, once.
func (e *Engine) closeTrigger(ctx context.Context, id, kind, key string, data map[string]any) {
	ev := event.Event{Kind: kind, Subject: id, Trigger: id, Data: mustJSON(data)}
	_, err := e.st.Append(ctx, store.Context{Type: "trigger", ID: id}, []event.Event{ev}, store.AppendOptions{IdempotencyKey: key})
	if err != nil {
		e.log.Error().Err(err).Str("trigger", id).Str("kind", kind).Msg("trigger event not written")
	}
}

// TriggerSource is where a trigger POST came from, recorded in
// trigger.fired.
type TriggerSource struct {
	Addr    string            `json:"addr,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// TriggerOutcome is the answer to a trigger POST; a replay gets the first
// POST's answer with Replayed set.
type TriggerOutcome struct {
	TriggerID string `json:"triggerId"`
	Status    string `json:"status"`
	FlowName  string `json:"flowName"`
	RunID     string `json:"runId"`
	Step      string `json:"step"`
	FiredAt   string `json:"firedAt"`
	Replayed  bool   `json:"replayed"`
}

// FireTrigger resolves the trigger await named by id with payload (a JSON
// value): trigger.fired on the trigger's stream, step.resumed on the run's,
// and the step queued with the payload as `_resume.payload`. It fires once:
// a repeat returns the first outcome with Replayed and changes nothing.
// Errors: ErrTriggerInvalid (not signed by this server), store.ErrNotFound
// (no such trigger), ErrTriggerGone (expired, timed out, canceled or its
// run ended), ErrPayloadInvalid.
func (e *Engine) FireTrigger(ctx context.Context, id string, payload json.RawMessage, src TriggerSource) (TriggerOutcome, error) {
	if !auth.LooksLikeTriggerID(id) {
		return TriggerOutcome{}, fmt.Errorf("engine: trigger %q: %w", id, store.ErrNotFound)
	}
	now := e.opts.Now()
	_, verr := e.opts.Triggers.Verify(id, now)
	if errors.Is(verr, auth.ErrInvalidToken) {
		return TriggerOutcome{}, ErrTriggerInvalid
	}
	reg, err := e.triggerRecord(ctx, id)
	if err != nil {
		return TriggerOutcome{}, err
	}
	d, err := e.Definition(ctx, reg.FlowName)
	if err != nil {
		return TriggerOutcome{}, err
	}
	if len(payload) == 0 {
		payload = json.RawMessage(`null`)
	}
	var out TriggerOutcome
	fired := false
	err = e.retry(ctx, func() error {
		fired = false
		r, err := e.readRun(ctx, reg.FlowName, reg.RunID)
		if err != nil {
			return err
		}
		aw := r.state.Awaits[id]
		switch {
		case aw == nil:
			return fmt.Errorf("engine: trigger %s: %w", id, store.ErrNotFound)
		case aw.Status == awaitResumed && len(aw.Outcome) > 0:
			if err := json.Unmarshal(aw.Outcome, &out); err != nil {
				return err
			}
			out.Replayed = true
			return nil
		case aw.Status != awaitWaiting || r.ended() || verr != nil:
			return ErrTriggerGone
		}
		if err := checkSchema(d, aw.Step, payload); err != nil {
			return err
		}
		out = TriggerOutcome{TriggerID: id, Status: "fired", FlowName: r.meta.FlowName, RunID: r.meta.RunID, Step: aw.Step, FiredAt: isoMS(now.UnixMilli())}
		aw.Outcome = mustJSON(out)
		u := e.resume(r, id, "Trigger fired", map[string]any{"triggerId": id, "payload": payload}, now.UnixMilli())
		if _, err := e.commit(ctx, r, u); err != nil {
			return err
		}
		fired = true
		return nil
	})
	if err != nil {
		return TriggerOutcome{}, err
	}
	// The fire is decided; trigger.fired follows it, once, by its
	// idempotency key, also when a replay finds the first POST's
	// append missing.
	if fired || out.Replayed {
		ev := event.Event{Kind: "trigger.fired", Subject: id, Trigger: id, RunID: out.RunID, FlowName: out.FlowName, Step: out.Step,
			CorrelationID: out.RunID, Data: mustJSON(map[string]any{"payload": payload, "source": src})}
		if _, err := e.st.Append(ctx, store.Context{Type: "trigger", ID: id}, []event.Event{ev}, store.AppendOptions{IdempotencyKey: "fired"}); err != nil {
			e.log.Error().Err(err).Str("trigger", id).Msg("trigger.fired not written")
		}
	}
	return out, nil
}

// triggerRecord reads a trigger's registration from its stream.
func (e *Engine) triggerRecord(ctx context.Context, id string) (event.Event, error) {
	evs, err := e.st.Range(ctx, store.Context{Type: "trigger", ID: id}, store.RangeQuery{Limit: 1})
	if err != nil {
		return event.Event{}, err
	}
	if len(evs) == 0 || evs[0].Kind != "trigger.registered" || evs[0].FlowName == "" || evs[0].RunID == "" {
		return event.Event{}, fmt.Errorf("engine: trigger %s: %w", id, store.ErrNotFound)
	}
	return evs[0], nil
}

// PayloadError names each place of a trigger payload that breaks the
// trigger's schema (payload, payload.approved, ...) and why.
type PayloadError struct {
	Fields map[string]string
}

func (e *PayloadError) Error() string { return fmt.Sprintf("%v: %v", ErrPayloadInvalid, e.Fields) }

// Unwrap makes a PayloadError an ErrPayloadInvalid whose fields reach the
// caller.
func (e *PayloadError) Unwrap() error {
	return &nqd.Error{Code: nqd.CodeUnprocessable, Message: "The payload does not match the trigger's schema; one line per failing place.",
		Fields: e.Fields, Err: ErrPayloadInvalid}
}

// checkSchema validates a trigger payload against the step's schema.
func checkSchema(d *flows.Definition, step string, payload json.RawMessage) error {
	s, ok := d.Steps[step]
	if !ok || s.Await == nil || len(s.Await.Schema) == 0 {
		return nil
	}
	sch, bad := flows.CompileSchema(s.Await.Schema, "schema")
	if bad != nil {
		// Stored before schemas were checked when stored: refuse rather
		// than let a payload through unchecked.
		return &PayloadError{Fields: map[string]string{"payload": "the trigger's schema is not one nqd enforces"}}
	}
	if bad := sch.Validate(payload, "payload"); bad != nil {
		return &PayloadError{Fields: bad}
	}
	return nil
}

// WaitQuery selects pending awaits; zero fields select all.
type WaitQuery struct {
	Kind     string // time, event or trigger
	FlowName string
	// EventKind keeps event awaits waiting for this event kind.
	EventKind string
	// Before keeps awaits due (resume time or deadline) before it, epoch ms.
	Before int64
	Limit  int // default and cap 1000
}

// Wait is one pending await: who waits on what, until when.
type Wait struct {
	AwaitID      string `json:"awaitId"`
	Kind         string `json:"kind"`
	FlowName     string `json:"flowName"`
	RunID        string `json:"runId"`
	Step         string `json:"step"`
	RegisteredAt string `json:"registeredAt"`
	ResumeAt     string `json:"resumeAt,omitempty"`
	Deadline     string `json:"deadline,omitempty"`
	EventKind    string `json:"eventKind,omitempty"`
	Condition    string `json:"condition,omitempty"`
	TriggerID    string `json:"triggerId,omitempty"`
	TriggerType  string `json:"triggerType,omitempty"`
	due          int64
}

// Waits lists the pending awaits of runs still going, soonest due first. It
// reads the run records, which a resume changes in the same step as it
// appends step.resumed, so a resumed await is never listed.
func (e *Engine) Waits(ctx context.Context, q WaitQuery) ([]Wait, error) {
	if q.Limit <= 0 || q.Limit > 1000 {
		q.Limit = 1000
	}
	var out []Wait
	err := e.eachGoingRun(ctx, q.FlowName, func(r *run) { out = append(out, r.waits(q)...) })
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Wait) int {
		if c := cmp.Compare(dueOrMax(a.due), dueOrMax(b.due)); c != 0 {
			return c
		}
		return strings.Compare(a.AwaitID, b.AwaitID)
	})
	if len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, nil
}

// PendingAwaits counts the pending awaits of runs still going, by await
// type (time, event or trigger). It reads every such run's record.
func (e *Engine) PendingAwaits(ctx context.Context) (map[string]int, error) {
	n := map[string]int{}
	err := e.eachGoingRun(ctx, "", func(r *run) {
		for _, aw := range r.state.Awaits {
			if aw.Status == awaitWaiting {
				n[aw.Type]++
			}
		}
	})
	return n, err
}

// eachGoingRun calls fn with each awaiting or running run of flow, or of
// every stored flow when flow is empty.
func (e *Engine) eachGoingRun(ctx context.Context, flow string, fn func(*run)) error {
	var names []string
	if flow != "" {
		names = []string{flow}
	} else {
		defs, err := e.st.Definitions(ctx)
		if err != nil {
			return err
		}
		for name := range defs {
			names = append(names, name)
		}
	}
	for _, flow := range names {
		for _, status := range []string{store.RunAwaiting, store.RunRunning} {
			for off := 0; ; off += 100 {
				page, err := e.st.ListRuns(ctx, flow, status, off, 100)
				if err != nil {
					return err
				}
				for _, m := range page.Runs {
					r, err := e.readRun(ctx, flow, m.RunID)
					if errors.Is(err, store.ErrNotFound) {
						continue
					}
					if err != nil {
						return err
					}
					fn(r)
				}
				if len(page.Runs) < 100 {
					break
				}
			}
		}
	}
	return nil
}

func dueOrMax(ms int64) int64 {
	if ms == 0 {
		return math.MaxInt64
	}
	return ms
}

func (r *run) waits(q WaitQuery) []Wait {
	var out []Wait
	for id, aw := range r.state.Awaits {
		if aw.Status != awaitWaiting || (q.Kind != "" && aw.Type != q.Kind) || (q.EventKind != "" && aw.EventKind != q.EventKind) {
			continue
		}
		w := Wait{AwaitID: id, Kind: aw.Type, FlowName: r.meta.FlowName, RunID: r.meta.RunID, Step: aw.Step,
			RegisteredAt: isoMS(aw.RegisteredAt), EventKind: aw.EventKind, Condition: aw.Where, TriggerType: aw.TriggerType}
		if aw.ResumeAt > 0 {
			w.ResumeAt, w.due = isoMS(aw.ResumeAt), aw.ResumeAt
		}
		if aw.Deadline > 0 {
			w.Deadline = isoMS(aw.Deadline)
			if w.due == 0 || aw.Deadline < w.due {
				w.due = aw.Deadline
			}
		}
		if aw.Type == "trigger" {
			w.TriggerID = id
		}
		if q.Before > 0 && (w.due == 0 || w.due >= q.Before) {
			continue
		}
		out = append(out, w)
	}
	return out
}

// StepTrigger returns the id of the trigger await step of a run waits on,
// the await a webhook call to the run's step resolves with FireTrigger.
// Errors: store.ErrNotFound (no such run), ErrTriggerGone (the run ended,
// or the step waits on nothing), a bad request when the step waits on a
// time or an event.
func (e *Engine) StepTrigger(ctx context.Context, flow, runID, step string) (string, error) {
	r, err := e.readRun(ctx, flow, runID)
	if errors.Is(err, store.ErrNotFound) {
		return "", nqd.Refine(err, "Flow not found")
	}
	if err != nil {
		return "", err
	}
	if r.ended() {
		return "", nqd.Refine(ErrTriggerGone, "Flow is %s", r.meta.Status)
	}
	id, aw := r.pendingAwait(step)
	switch {
	case aw == nil:
		return "", nqd.Refine(ErrTriggerGone, "Step is not awaiting")
	case aw.Type != "trigger":
		return "", &nqd.Error{Code: nqd.CodeBadRequest, Message: "Invalid await type: the step awaits a " + aw.Type + ", not a webhook"}
	}
	return id, nil
}
