package engine

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/store"
)

// Complete finishes the job held by ack with result: step.completed, and
// flow.completed when no step of the run is left to run. evs, progress
// events (a step.started not sent yet, last logs, emits), are stored before
// step.completed in the same atomic step, and the steps their emits make
// ready are queued in it, so the run goes on. Once it succeeded,
// a repeat with the same lease succeeds again and writes nothing. Errors:
// ErrLeaseLost, ErrRunEnded, ErrStateInvalid, a *ReportError.
func (e *Engine) Complete(ctx context.Context, ack store.JobAck, result json.RawMessage, evs ...event.Event) error {
	_, _, err := e.completeNext(ctx, ack, result, nil, evs)
	return err
}

// Next is what a completion claims for its worker (CompleteClaiming): up
// to Max (at least 1) ready jobs of Queues.
type Next struct {
	Queues []string
	Max    int
}

// CompleteClaiming completes as Complete does and, on a store that claims
// in its run updates (store.RunUpdate.Claim), claims up to next.Max ready
// jobs of next.Queues in the completion's own write, as Claim would without
// waiting: a worker that takes its next job with each completion then costs
// the store one write per job. claimed is false when the store cannot, or
// the call repeated a completion: then nothing was claimed, and the caller
// claims on its own (ClaimHanded). Errors: as Complete's.
func (e *Engine) CompleteClaiming(ctx context.Context, ack store.JobAck, result json.RawMessage, next Next, evs ...event.Event) (jobs []store.Job, claimed bool, err error) {
	if !e.features.ClaimsInUpdate && !e.handsOver() {
		return nil, false, e.Complete(ctx, ack, result, evs...)
	}
	next.Max = max(next.Max, 1)
	return e.completeNext(ctx, ack, result, &next, evs)
}

// completeNext is Complete, claiming next in the completion's write when set;
// claimed says whether it did (not when the call repeated a completion).
func (e *Engine) completeNext(ctx context.Context, ack store.JobAck, result json.RawMessage, next *Next, evs []event.Event) (jobs []store.Job, claimed bool, err error) {
	j, cached, err := e.heldForAck(ctx, ack)
	if errors.Is(err, ErrLeaseLost) {
		return nil, false, e.repeated(ctx, ack, stepCompleted)
	}
	if err != nil {
		return nil, false, err
	}
	jobs, err = e.complete(ctx, j, ack, result, evs, next)
	if cached && (errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrRunEnded)) {
		// The job may have been gone before this call: answer as for a
		// job read from the store.
		return nil, false, e.repeatedOr(ctx, ack, stepCompleted, err)
	}
	if err != nil || next == nil {
		return nil, false, err
	}
	jobs, err = e.handOut(ctx, jobs)
	return jobs, err == nil, err
}

// complete writes j's completion; with next it claims in the same write, and
// answers the jobs the store claimed. Emits among evs are decided in that
// write too, as the events call decides them: the steps they make ready are
// queued (and may be handed to a waiting claim, or taken by next), and an
// event name counted before stores nothing.
func (e *Engine) complete(ctx context.Context, j store.Job, ack store.JobAck, result json.RawMessage, evs []event.Event, next *Next) ([]store.Job, error) {
	if err := e.stamp(ctx, j, evs, true); err != nil {
		return nil, err
	}
	emits := slices.ContainsFunc(evs, func(ev event.Event) bool { return ev.Kind == "emit" })
	// As for an emit of the events call, a store that checks the
	// definition in the update lets it be decided on the cached one.
	var body []byte
	var d *flows.Definition
	if emits {
		body, d = e.checkedDefinition(j.FlowName)
	}
	// The steps the emits make ready go to this completion's claim first,
	// written claimed in its own write, then to a claim waiting here.
	handsOff, takes := emits, emits && next != nil && e.handsOver()
	// One clock reading for every retry, as for an emit.
	now := e.nowMS()
	var claimed []store.Job
	err := e.retry(ctx, func() error {
		if emits && d == nil {
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
		var fx effects
		for _, ev := range evs {
			if ev.Kind != "emit" {
				fx.events = append(fx.events, ev)
				continue
			}
			if name, payload := emitName(ev.Data); !r.emitted(name) {
				e.decideEmit(r, d, ev, name, payload, now, &fx)
			}
		}
		s := r.state.Steps[j.Step]
		if s == nil {
			s = &stepState{Queue: j.Queue}
			r.state.Steps[j.Step] = s
		}
		s.Status, s.Attempt, s.Acked = stepCompleted, j.Attempt, ackedBy(ack.Lease, stepCompleted)
		r.meta.CompletedSteps++
		data := map[string]any{}
		if len(result) > 0 {
			data["result"] = result
		}
		done := flowEvent(r, "step.completed", j.Step, data)
		done.Attempt, done.Meta = j.Attempt, jobMeta(j.Attempt, j.ID)
		fx.events = append(fx.events, done)
		var u store.RunUpdate
		if !r.anyActive() {
			u, err = e.end(r, store.RunCompleted, now)
			fx.events = append(fx.events, flowEvent(r, "flow.completed", "", map[string]any{"duration": now - r.meta.StartedAt}))
		} else {
			r.settle()
			u, err = r.update()
		}
		if err != nil {
			return err
		}
		fx.into(&u)
		if err := e.register(ctx, &fx); err != nil {
			return err
		}
		u.Ack, u.Definition = &ack, body
		var own []store.Job
		if takes {
			own = e.takeEnqueued(&u, *next, now)
		}
		if next != nil && e.features.ClaimsInUpdate && len(own) < next.Max {
			u.Claim = &store.ClaimRequest{
				Queues: next.Queues, Max: next.Max - len(own), Lease: e.newLease(),
				Now: now, LeaseUntil: now + e.opts.Lease.Milliseconds(),
			}
		}
		var deliver func(error) bool
		if handsOff && len(own) == 0 {
			deliver = e.handOff(&u, now)
		}
		res, err := e.leaseCommit(ctx, r, u)
		if deliver != nil && !deliver(err) && err != nil {
			handsOff = false
		}
		if err != nil {
			// The store may have refused the jobs written claimed (their
			// queue was paused): the next try enqueues them as usual.
			takes = false
		}
		if errors.Is(err, errRace) && body != nil {
			body, d = nil, nil
		}
		if err == nil {
			claimed = append(own, res.Claimed...)
		}
		return err
	})
	return claimed, err
}

// takeEnqueued marks up to next.Max of the jobs u enqueues, ready at now on
// next's queues, claimed under leases of their own, and returns them: a
// completion that claims takes the steps its emits made ready in its own
// write, on a store that can enqueue a job claimed.
func (e *Engine) takeEnqueued(u *store.RunUpdate, next Next, now int64) []store.Job {
	var own []store.Job
	for i := range u.Enqueue {
		j := &u.Enqueue[i]
		if len(own) == next.Max || j.ReadyAt > now || !slices.Contains(next.Queues, j.Queue) {
			continue
		}
		j.Lease, j.LeaseUntil = e.newLease(), now+e.opts.Lease.Milliseconds()
		own = append(own, *j)
	}
	return own
}
