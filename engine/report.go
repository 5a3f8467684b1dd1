package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/store"
)

// Kinds a worker may append while it runs a step; the lifecycle kinds go
// through Complete and Fail so the engine can act on them.
func progressKind(kind string) bool {
	switch {
	case kind == "step.started", kind == "log", kind == "emit", kind == "step.progress":
		return true
	case strings.HasPrefix(kind, "log."), strings.HasPrefix(kind, "state."):
		return true
	}
	return false
}

// ReportError is a worker's report the engine refuses: Field names the
// offending part of the request (e.g. `events[2].kind`), Reason says why.
type ReportError struct{ Field, Reason string }

func (e *ReportError) Error() string { return "engine: " + e.Field + ": " + e.Reason }

// Unwrap makes a ReportError a store.ErrInvalid whose message and field say
// why to the worker.
func (e *ReportError) Unwrap() error {
	return &nqd.Error{Code: nqd.CodeValidation, Message: "The report was refused and nothing was stored. " + e.Field + ": " + e.Reason + ".",
		Fields: map[string]string{e.Field: e.Reason}, Err: store.ErrInvalid}
}

// Report appends a worker's progress events for the job it holds: each gets
// the run, flow, step and attempt of the job. An emit records its event for
// fan-in and queues every step that now has all its subscriptions, once per
// run: a repeated emit of the same event is stored once. With a key, a
// repeat of the report for the same job and lease stores nothing new and
// returns the first one's events (less its emits, which count once anyway).
// Errors: ErrLeaseLost, ErrRunEnded, ErrStateInvalid (a *StateError), a
// *ReportError.
func (e *Engine) Report(ctx context.Context, ack store.JobAck, evs []event.Event, key string) ([]event.Event, error) {
	// A report about a job a claim on this instance handed out is taken
	// without reading the job: each write names the lease for the store to
	// check (store.AppendOptions.Held, store.RunUpdate.Held).
	var held *store.JobAck
	j, ok := e.recent.job(ack)
	if ok {
		held = &ack
	} else {
		var err error
		if j, err = e.held(ctx, ack); err != nil {
			return nil, err
		}
	}
	if err := e.stamp(ctx, j, evs, true); err != nil {
		return nil, err
	}
	var out []event.Event
	var plain []event.Event
	segment := 0
	// Emits split a report into several writes; each gets a key of its
	// own, scoped to the job and lease so that keys of different workers
	// never meet.
	segmentKey := func() string {
		if key == "" {
			return ""
		}
		segment++
		return fmt.Sprintf("report:%s:%s:%d:%s", j.ID, leaseDigest(ack.Lease), segment-1, key)
	}
	flush := func() error {
		if len(plain) == 0 {
			return nil
		}
		res, err := e.st.Append(ctx, store.Context{Type: "flow", ID: j.RunID}, plain, store.AppendOptions{IdempotencyKey: segmentKey(), Held: held})
		if held != nil && errors.Is(err, store.ErrConflict) {
			err = ErrLeaseLost
		}
		out = append(out, res.Events...)
		plain = nil
		return err
	}
	for _, ev := range evs {
		if ev.Kind != "emit" {
			plain = append(plain, ev)
			continue
		}
		// The events before an emit (a step.started the worker had not sent
		// yet, logs) are written in the emit's own run update.
		before := report{events: plain}
		if len(plain) > 0 {
			before.key = segmentKey()
		}
		plain = nil
		stored, err := e.emit(ctx, j, ev, held, before)
		if held != nil && errors.Is(err, ErrRunEnded) {
			// The job may have been gone before this call: answer as for
			// a job read from the store.
			if _, herr := e.held(ctx, ack); herr != nil {
				err = herr
			}
		}
		if err != nil {
			return out, err
		}
		out = append(out, stored...)
	}
	return out, flush()
}

// report is what a worker's report carries ahead of an emit, and the
// idempotency key it is written under.
type report struct {
	events []event.Event
	key    string
}

// stamp checks a worker's events about job j and gives each the run, flow,
// step and attempt of the job. Emits are allowed only where they can be
// acted on (withEmits).
func (e *Engine) stamp(ctx context.Context, j store.Job, evs []event.Event, withEmits bool) error {
	for i := range evs {
		if !progressKind(evs[i].Kind) || (!withEmits && evs[i].Kind == "emit") {
			reason := fmt.Sprintf("%q is not a progress event: complete or fail the job instead", evs[i].Kind)
			if evs[i].Kind == "emit" {
				reason = "emit through the events call or with the completion"
			}
			return &ReportError{Field: fmt.Sprintf("events[%d].kind", i), Reason: reason}
		}
		if evs[i].Kind == "emit" {
			if name, _ := emitName(evs[i].Data); name == "" {
				return &ReportError{Field: fmt.Sprintf("events[%d].data.event", i), Reason: "required: the name of the emitted event"}
			}
		}
		ev := &evs[i]
		ev.Subject, ev.RunID, ev.FlowName, ev.Step = j.RunID, j.RunID, j.FlowName, j.Step
		if ev.Attempt == 0 {
			ev.Attempt = j.Attempt
			if len(ev.Meta) == 0 {
				ev.Meta = jobMeta(j.Attempt, j.ID)
			}
		}
	}
	if !isStateWrite(evs) {
		return nil
	}
	d, err := e.Definition(ctx, j.FlowName)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return checkState(d, evs)
}

// emitName reads an emit's event name and payload in either shape the
// reducers accept: {event, payload} or {name, ...payload}.
func emitName(data json.RawMessage) (string, json.RawMessage) {
	var d struct {
		Event   string          `json:"event"`
		Name    string          `json:"name"`
		Payload json.RawMessage `json:"payload"`
	}
	_ = json.Unmarshal(data, &d)
	if d.Event != "" {
		if len(d.Payload) == 0 {
			return d.Event, json.RawMessage(`null`)
		}
		return d.Event, d.Payload
	}
	if d.Name == "" {
		return "", nil
	}
	var rest map[string]json.RawMessage
	_ = json.Unmarshal(data, &rest)
	delete(rest, "name")
	return d.Name, mustJSON(rest)
}

// emit stores ev, an emit of job j, and queues the steps it makes ready.
// held, when set, is the lease j is taken to be held by, not yet checked:
// the update names it, and a refused update tells a lost lease from a lost
// race.
func (e *Engine) emit(ctx context.Context, j store.Job, ev event.Event, held *store.JobAck, before report) ([]event.Event, error) {
	name, payload := emitName(ev.Data)
	// As for a start, a store that checks the definition in the update
	// lets the emit be decided on the cached one (see checkedDefinition);
	// once the store refused an update, the next try reads the stored one.
	body, d := e.checkedDefinition(j.FlowName)
	var out []event.Event
	// One clock reading for every retry, so that a trigger a ready step
	// registers keeps its id.
	now := e.nowMS()
	// The step the emit makes ready may go to a claim waiting here, as a
	// start's first step does; once the store refused that (its queue was
	// paused, or the run moved on), the next try enqueues it as usual.
	handsOff := true
	err := e.retry(ctx, func() error {
		if d == nil {
			var err error
			if d, err = e.Definition(ctx, j.FlowName); err != nil {
				return err
			}
		}
		r, release, err := e.readRunForUpdate(ctx, j.FlowName, j.RunID)
		if err != nil {
			return err
		}
		defer release()
		if r.ended() {
			return ErrRunEnded
		}
		if r.emitted(name) {
			// A redelivered emit: fan-in already counted it. The events
			// before it are appended under their key, which replays them
			// if this is a repeat of the report that wrote them with the
			// emit; the append checks the lease, or, with nothing to
			// append, it is checked here.
			if len(before.events) > 0 {
				res, err := e.st.Append(ctx, store.Context{Type: "flow", ID: j.RunID}, before.events,
					store.AppendOptions{IdempotencyKey: before.key, Held: held})
				if held != nil && errors.Is(err, store.ErrConflict) {
					err = ErrLeaseLost
				}
				out = res.Events
				return err
			}
			if held != nil {
				_, err := e.held(ctx, *held)
				return err
			}
			return nil
		}
		fx := effects{events: slices.Clip(before.events)}
		e.decideEmit(r, d, ev, name, payload, now, &fx)
		r.settle()
		u, err := r.update()
		if err != nil {
			return err
		}
		fx.into(&u)
		if err := e.register(ctx, &fx); err != nil {
			return err
		}
		u.Definition, u.Held, u.IdempotencyKey = body, held, before.key
		var deliver func(error) bool
		if handsOff {
			deliver = e.handOff(&u, now)
		}
		res, err := e.leaseCommit(ctx, r, u)
		if deliver != nil && !deliver(err) && err != nil {
			handsOff = false
		}
		if errors.Is(err, errRace) && body != nil {
			body, d = nil, nil
		}
		out = res.Events
		return err
	})
	return out, err
}

// emitted reports whether the run counted an emit of name already: fan-in
// counts a name once, so a later emit of it stores nothing.
func (r *run) emitted(name string) bool {
	_, seen := r.state.Emits[name]
	return seen
}

// decideEmit counts ev, an emit of name with payload not counted yet, in r,
// and plans the steps it makes ready into fx, after the emit itself.
func (e *Engine) decideEmit(r *run, d *flows.Definition, ev event.Event, name string, payload json.RawMessage, now int64, fx *effects) {
	r.state.Emits[name] = payload
	if r.meta.EmittedEvents == nil {
		r.meta.EmittedEvents = map[string]int64{}
	}
	r.meta.EmittedEvents[name] = now
	fx.events = append(fx.events, ev)
	for _, step := range ready(d, r, name) {
		e.plan(r, d, step, stepInput(d, r, step), now, fx)
	}
}
