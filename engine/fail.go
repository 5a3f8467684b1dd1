package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Fail reports that the job held by ack failed with msg. When the step's
// retry policy allows another attempt and retriable is not false, the step
// is retried after its backoff (step.failed with willRetry, then step.retry
// when due); otherwise the step fails and so does the run. evs are stored
// before step.failed as with Complete. Once it succeeded, a repeat with the
// same lease succeeds again and writes nothing. Errors: ErrLeaseLost,
// ErrRunEnded, ErrStateInvalid, a *ReportError.
func (e *Engine) Fail(ctx context.Context, ack store.JobAck, msg string, retriable *bool, evs ...event.Event) error {
	return e.fail(ctx, ack, msg, retriable == nil || *retriable, evs)
}

func (e *Engine) fail(ctx context.Context, ack store.JobAck, msg string, retriable bool, first []event.Event) error {
	j, cached, err := e.heldForAck(ctx, ack)
	if errors.Is(err, ErrLeaseLost) {
		return e.repeated(ctx, ack, stepFailed)
	}
	if err != nil {
		return err
	}
	err = e.failHeld(ctx, j, ack, msg, retriable, first)
	if cached && (errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrRunEnded)) {
		return e.repeatedOr(ctx, ack, stepFailed, err)
	}
	return err
}

func (e *Engine) failHeld(ctx context.Context, j store.Job, ack store.JobAck, msg string, retriable bool, first []event.Event) error {
	if err := e.stamp(ctx, j, first, false); err != nil {
		return err
	}
	d, err := e.Definition(ctx, j.FlowName)
	if err != nil {
		return err
	}
	policy := d.Steps[j.Step].RetryPolicy
	willRetry := retriable && j.Attempt < policy.MaxAttempts() && policy.Retriable(msg)
	return e.retry(ctx, func() error {
		r, release, err := e.readRunForUpdate(ctx, j.FlowName, j.RunID)
		if err != nil {
			return err
		}
		defer release()
		if r.ended() {
			return ErrRunEnded
		}
		now := e.nowMS()
		s := r.state.Steps[j.Step]
		if s == nil {
			s = &stepState{Queue: j.Queue}
			r.state.Steps[j.Step] = s
		}
		s.Attempt, s.Acked = j.Attempt, ackedBy(ack.Lease, stepFailed)
		meta := map[string]any{"jobId": j.ID, "maxAttempts": policy.MaxAttempts()}
		if policy != nil {
			meta["backoff"] = policy.Backoff
		}
		data := map[string]any{"error": msg, "willRetry": willRetry}
		var u store.RunUpdate
		evs := slices.Clip(first)
		if willRetry {
			at := now + policy.Delay(j.Attempt).Milliseconds()
			data["nextRetryAt"] = isoMS(at)
			s.Status = stepRetrying
			evs = append(evs, withAttempt(flowEvent(r, "step.failed", j.Step, data), j.Attempt, meta))
			u, err = r.update()
			t := retryTimer(r, j.Step)
			t.Due = at
			u.SetTimers = []store.Timer{t}
		} else {
			s.Status = stepFailed
			evs = append(evs, withAttempt(flowEvent(r, "step.failed", j.Step, data), j.Attempt, meta))
			u, err = e.end(r, store.RunFailed, now)
			evs = append(evs, flowEvent(r, "flow.failed", "", map[string]any{
				"error": fmt.Sprintf("step %s failed: %s", j.Step, msg), "duration": now - r.meta.StartedAt,
			}))
		}
		if err != nil {
			return err
		}
		u.Events, u.Ack = evs, &ack
		// end lists the failing job among those to withdraw; the ack
		// deletes it already.
		u.Remove = removeRef(u.Remove, j.ID)
		if _, err := e.leaseCommit(ctx, r, u); err != nil {
			return err
		}
		e.closeTriggers(ctx, r, "run failed")
		return nil
	})
}

func removeRef(refs []store.JobRef, id string) []store.JobRef {
	out := refs[:0]
	for _, r := range refs {
		if r.ID != id {
			out = append(out, r)
		}
	}
	return out
}
