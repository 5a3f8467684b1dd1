package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/store"
)

// Started is the answer to a start, in the shape the v0.3 UI reads: the entry
// job's id and queue, the entry step, and the new run's id.
type Started struct {
	ID     string `json:"id"`
	Queue  string `json:"queue"`
	Step   string `json:"step"`
	FlowID string `json:"flowId"`
	// Replayed is true when idempotencyKey had started the run before.
	Replayed bool `json:"-"`
}

// Start begins a run of flow with input (a JSON object; nil means {}),
// appending flow.started and queueing the entry step in one step. A repeat
// with the same non-empty idempotencyKey returns the first run. Errors:
// store.ErrNotFound (no such flow), store.ErrInvalid.
func (e *Engine) Start(ctx context.Context, flow string, input json.RawMessage, idempotencyKey string) (Started, error) {
	return e.StartKeeping(ctx, flow, input, idempotencyKey, nil)
}

// InputKeeper may replace a run's input once the run's id is known, before
// the run is written: the API keeps a large input in its bucket, and the
// run holds a reference to it. It must give the same answer for the same
// run and input, since an idempotent start compares the stored input with
// the one it is asked for.
type InputKeeper func(ctx context.Context, run string, input json.RawMessage) (json.RawMessage, error)

// StartKeeping is Start with the input passed through keep, when set.
func (e *Engine) StartKeeping(ctx context.Context, flow string, input json.RawMessage, idempotencyKey string, keep InputKeeper) (Started, error) {
	if len(input) == 0 {
		input = json.RawMessage(`{}`)
	}
	body, d := e.checkedDefinition(flow)
	if d == nil {
		var err error
		if d, err = e.Definition(ctx, flow); err != nil {
			return Started{}, err
		}
	}
	// One id for both tries below, so a kept input names the run it is in.
	id := e.newRunID()
	if idempotencyKey != "" {
		id = idempotentRunID(flow, idempotencyKey)
	}
	if keep != nil {
		var err error
		if input, err = keep(ctx, id, input); err != nil {
			return Started{}, err
		}
	}
	if body != nil {
		out, err := e.start(ctx, flow, id, d, body, input, idempotencyKey)
		if !errors.Is(err, errStaleDefinition) {
			return out, err
		}
		// Refused: the definition changed since it was cached, or the
		// run id is taken. Decide again on the stored definition, which
		// tells the two apart.
		if d, err = e.Definition(ctx, flow); err != nil {
			return Started{}, err
		}
	}
	return e.start(ctx, flow, id, d, nil, input, idempotencyKey)
}

// errStaleDefinition is a start refused while it named a cached definition.
var errStaleDefinition = errors.New("engine: start decided on a cached definition was refused")

// start writes run id of d; body, when set, is d as cached, which the store
// checks is still the stored definition (see checkedDefinition).
func (e *Engine) start(ctx context.Context, flow, id string, d *flows.Definition, body []byte, input json.RawMessage, idempotencyKey string) (Started, error) {
	entry := d.Steps[d.Entry]
	out := Started{ID: store.JobID(id, d.Entry), Queue: entry.Queue, Step: d.Entry, FlowID: id}
	now := e.nowMS()
	r := &run{
		meta:  store.RunMeta{FlowName: flow, RunID: id, Status: store.RunRunning, StartedAt: now, StepCount: len(d.Steps)},
		state: runState{Input: input, Steps: map[string]*stepState{}},
	}
	fx := effects{events: []event.Event{flowEvent(r, "flow.started", "", map[string]any{"name": flow, "input": input})}}
	e.plan(r, d, d.Entry, input, now, &fx)
	r.settle()
	u, err := r.update()
	if err != nil {
		return Started{}, err
	}
	fx.into(&u)
	u.Definition = body
	if err := e.register(ctx, &fx); err != nil {
		return Started{}, err
	}
	if deliver := e.handOff(&u, now); deliver != nil {
		_, err = e.commit(ctx, r, u)
		if deliver(err) || !errors.Is(err, errRace) {
			return out, err
		}
		// Refused: the run exists already, or the job's queue was paused
		// meanwhile. Decide as without a waiting claim.
		u.Enqueue[0].Lease, u.Enqueue[0].LeaseUntil = "", 0
	}
	_, err = e.commit(ctx, r, u)
	if errors.Is(err, errRace) && body != nil {
		return Started{}, errStaleDefinition
	}
	if errors.Is(err, errRace) && idempotencyKey != "" {
		if err := e.sameInput(ctx, flow, id, input); err != nil {
			return Started{}, err
		}
		out.Replayed = true
		return out, nil
	}
	if errors.Is(err, errRace) {
		return Started{}, fmt.Errorf("engine: run id %s taken: %w", id, store.ErrConflict)
	}
	return out, err
}

// sameInput checks that a start replayed by its idempotency key asks for the
// run the key started: the same input, compared as compact JSON. Errors:
// store.ErrKeyReused.
func (e *Engine) sameInput(ctx context.Context, flow, id string, input json.RawMessage) error {
	r, err := e.readRun(ctx, flow, id)
	if err != nil {
		return err
	}
	var was, now bytes.Buffer
	if json.Compact(&was, r.state.Input) != nil || json.Compact(&now, input) != nil || !bytes.Equal(was.Bytes(), now.Bytes()) {
		return fmt.Errorf("engine: start of run %s: %w", id, store.ErrKeyReused)
	}
	return nil
}

// Cancel ends a running run: it appends flow.cancelled, marks the run
// canceled and withdraws its queued jobs and retries, so nothing more is
// dispatched; a worker holding one of its jobs learns of it on its next
// heartbeat. Canceling an ended run changes nothing and returns its status.
// Errors: store.ErrNotFound.
func (e *Engine) Cancel(ctx context.Context, flow, runID, reason string) (previous string, err error) {
	err = e.retry(ctx, func() error {
		r, err := e.readRun(ctx, flow, runID)
		if err != nil {
			return err
		}
		previous = r.meta.Status
		if r.ended() {
			return nil
		}
		now := e.nowMS()
		data := map[string]any{"canceledAt": isoMS(now), "previousStatus": previous}
		if reason != "" {
			data["reason"] = reason
		}
		u, err := e.end(r, store.RunCancelled, now)
		if err != nil {
			return err
		}
		u.Events = []event.Event{flowEvent(r, "flow.cancelled", "", data)}
		if _, err = e.commit(ctx, r, u); err != nil {
			return err
		}
		e.closeTriggers(ctx, r, reason)
		return nil
	})
	return previous, err
}

// closeTriggers writes trigger.cancelled to the triggers an ended run
// withdrew.
func (e *Engine) closeTriggers(ctx context.Context, r *run, reason string) {
	if reason == "" {
		reason = "run " + r.meta.Status
	}
	for _, id := range r.cancelled {
		e.closeTrigger(ctx, id, "trigger.cancelled", "cancelled", map[string]any{"reason": reason})
	}
}

// end marks r ended with status and returns the update that withdraws its
// remaining jobs and timers.
func (e *Engine) end(r *run, status string, now int64) (store.RunUpdate, error) {
	var remove []store.JobRef
	var timers []store.Timer
	for name, s := range r.state.Steps {
		switch s.Status {
		case stepQueued:
			remove = append(remove, store.JobRef{Queue: s.Queue, ID: store.JobID(r.meta.RunID, name)})
		case stepRetrying:
			timers = append(timers, retryTimer(r, name))
		case stepAwaiting:
			timers = append(timers, awaitTimers(r, name)...)
			if aw := r.state.Awaits[s.Await]; aw != nil && aw.Status == awaitWaiting {
				aw.Status = awaitCancelled
				if aw.Type == "trigger" {
					r.cancelled = append(r.cancelled, s.Await)
				}
			}
		}
	}
	r.meta.Status, r.meta.CompletedAt = status, now
	u, err := r.update()
	u.Remove, u.ClearTimers = remove, timers
	return u, err
}

func retryTimer(r *run, step string) store.Timer {
	return store.Timer{Kind: "retry", FlowName: r.meta.FlowName, RunID: r.meta.RunID, Step: step}
}

// Restarted is the answer to a restart, in the shape the v0.4/v0.5 UI reads.
type Restarted struct {
	Success  bool   `json:"success"`
	OldRunID string `json:"oldRunId"`
	NewRunID string `json:"newRunId"`
	FlowName string `json:"flowName"`
}

// Restart cancels a run that is still going (reason "Restarted") and starts
// a new one with the same input. Errors: store.ErrNotFound.
func (e *Engine) Restart(ctx context.Context, flow, runID string) (Restarted, error) {
	r, err := e.readRun(ctx, flow, runID)
	if err != nil {
		return Restarted{}, err
	}
	if !r.ended() {
		if _, err := e.Cancel(ctx, flow, runID, "Restarted"); err != nil {
			return Restarted{}, err
		}
	}
	s, err := e.Start(ctx, flow, r.state.Input, "")
	if err != nil {
		return Restarted{}, err
	}
	return Restarted{Success: true, OldRunID: runID, NewRunID: s.FlowID, FlowName: flow}, nil
}

// ClearHistory deletes every run of flow after canceling those still going,
// and returns how many it deleted.
func (e *Engine) ClearHistory(ctx context.Context, flow string) (int, error) {
	for {
		page, err := e.st.ListRuns(ctx, flow, store.RunRunning, 0, 100)
		if err != nil {
			return 0, err
		}
		if len(page.Runs) == 0 {
			page, err = e.st.ListRuns(ctx, flow, store.RunAwaiting, 0, 100)
			if err != nil {
				return 0, err
			}
		}
		if len(page.Runs) == 0 {
			break
		}
		for _, r := range page.Runs {
			if _, err := e.Cancel(ctx, flow, r.RunID, "History cleared"); err != nil && !errors.Is(err, store.ErrNotFound) {
				return 0, err
			}
		}
	}
	n, err := e.st.DeleteRuns(ctx, flow)
	e.recent.forgetRuns()
	return n, err
}

// Runs pages over a flow's runs, only those of status when it is set.
func (e *Engine) Runs(ctx context.Context, flow, status string, offset, limit int) (store.RunPage, error) {
	return e.st.ListRuns(ctx, flow, status, offset, limit)
}

// stepInput is the input a step's job gets: the run input for the entry,
// otherwise each subscribed event's payload keyed by event name (the final
// step of examples/flows/diamond.yaml gets both branches' payloads).
func stepInput(d *flows.Definition, r *run, step string) json.RawMessage {
	if step == d.Entry {
		return r.state.Input
	}
	in := map[string]json.RawMessage{}
	for _, sub := range d.Steps[step].Subscribes {
		if p, ok := r.state.Emits[sub]; ok {
			in[sub] = p
		}
	}
	return mustJSON(in)
}

// ready lists the steps that subscribe to ev, have not fired, and now have
// every subscribed event.
func ready(d *flows.Definition, r *run, ev string) []string {
	var out []string
	for _, name := range d.Subscribers(ev) {
		if _, fired := r.state.Steps[name]; fired {
			continue
		}
		if !slices.ContainsFunc(d.Steps[name].Subscribes, func(s string) bool { _, ok := r.state.Emits[s]; return !ok }) {
			out = append(out, name)
		}
	}
	return out
}
