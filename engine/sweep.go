package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/store"
)

// This file is the engine's side of the sweeper (package sweeper): one call
// classifies a run that the index says is still going and, when the run
// needs it, acts through the same versioned UpdateRun as every other
// decision, so a sweep racing the engine's own timers or workers never acts
// twice.

// Sweep classes of a run the index lists as running or awaiting.
const (
	// SweepMoving: an event arrived within the stall threshold, or a
	// worker holds one of its jobs. Left alone.
	SweepMoving = "moving"
	// SweepWaiting: a pending await is not due yet. Left alone.
	SweepWaiting = "waiting"
	// SweepOverdue: an await is past its deadline (or resume time) and the
	// engine's timer has not fired it; the sweep fires it.
	SweepOverdue = "overdue"
	// SweepStuck: no event for the threshold, no pending await, no leased
	// job; the sweep writes flow.stalled and re-dispatches the run's steps.
	SweepStuck = "stuck"
	// SweepFlagged: stuck, and flow.stalled already says so; nothing more
	// is done until the run moves again.
	SweepFlagged = "flagged"
	// SweepOrphaned: the stream holds the run's terminal event and the
	// record does not; the sweep repairs the record and its index.
	SweepOrphaned = "orphaned"
	// SweepGone: the run ended or was deleted since it was listed.
	SweepGone = "gone"
)

// tailLen is how many of a stream's newest events a sweep reads: a terminal
// event is followed by at most a few trigger closings, so it is among them.
const tailLen = 16

// SweepRun classifies run runID of flow and acts on it as its class says
// (see the Sweep* constants); it returns the class. stallAfter is how long
// a run may go without an event before it counts as stuck.
func (e *Engine) SweepRun(ctx context.Context, flow, runID string, stallAfter time.Duration) (string, error) {
	class := SweepGone
	err := e.retry(ctx, func() error {
		var err error
		class, err = e.sweepOnce(ctx, flow, runID, stallAfter)
		return err
	})
	return class, err
}

func (e *Engine) sweepOnce(ctx context.Context, flow, runID string, stallAfter time.Duration) (string, error) {
	r, err := e.readRun(ctx, flow, runID)
	if errors.Is(err, store.ErrNotFound) {
		return SweepGone, nil
	}
	if err != nil {
		return "", err
	}
	if r.ended() {
		return SweepGone, nil
	}
	tail, err := e.st.Range(ctx, store.Context{Type: "flow", ID: runID}, store.RangeQuery{Reverse: true, Limit: tailLen})
	if err != nil {
		return "", err
	}
	if end := terminalEvent(tail); end != nil {
		return SweepOrphaned, e.repairIndex(ctx, r, *end)
	}
	now := e.nowMS()
	if due := r.dueAwaits(now); len(due) > 0 {
		for _, t := range due {
			if err := e.fireAwaitTimer(ctx, t); err != nil {
				return "", err
			}
		}
		return SweepOverdue, nil
	}
	if r.waiting() {
		return SweepWaiting, nil
	}
	last := r.meta.StartedAt
	if len(tail) > 0 {
		last = max(last, int64(tail[0].ID.MS))
	}
	idle := now - last
	if idle < stallAfter.Milliseconds() {
		return SweepMoving, nil
	}
	if len(tail) > 0 && tail[0].Kind == "flow.stalled" {
		return SweepFlagged, nil
	}
	jobs, leased, err := e.queuedJobs(ctx, r, now)
	if err != nil || leased {
		return SweepMoving, err
	}
	d, err := e.Definition(ctx, flow)
	if err != nil {
		return "", err
	}
	return SweepStuck, e.stall(ctx, r, d, jobs, idle, stallAfter, now)
}

// terminalEvent returns the newest flow.completed, flow.failed or
// flow.cancelled of tail, which is newest first.
func terminalEvent(tail []event.Event) *event.Event {
	for i := range tail {
		switch tail[i].Kind {
		case "flow.completed", "flow.failed", "flow.cancelled":
			return &tail[i]
		}
	}
	return nil
}

var terminalStatus = map[string]string{
	"flow.completed": store.RunCompleted,
	"flow.failed":    store.RunFailed,
	"flow.cancelled": store.RunCancelled,
}

// repairIndex gives r the status its stream's terminal event says, in one
// update with flow.index.repaired, withdrawing what the run still had
// queued as its end would have.
func (e *Engine) repairIndex(ctx context.Context, r *run, end event.Event) error {
	from, to := r.meta.Status, terminalStatus[end.Kind]
	u, err := e.end(r, to, int64(end.ID.MS))
	if err != nil {
		return err
	}
	u.Events = []event.Event{flowEvent(r, "flow.index.repaired", "", map[string]any{
		"from": from, "to": to, "cause": end.ID.String(),
	})}
	if _, err := e.commit(ctx, r, u); err != nil {
		return err
	}
	e.closeTriggers(ctx, r, "run "+to)
	return nil
}

// dueAwaits returns, for each waiting await past its deadline or resume
// time, the timer the engine would have fired for it.
func (r *run) dueAwaits(now int64) []store.Timer {
	var out []store.Timer
	for _, s := range r.state.Steps {
		if s.Status != stepAwaiting {
			continue
		}
		aw := r.state.Awaits[s.Await]
		if aw == nil || aw.Status != awaitWaiting {
			continue
		}
		t := store.Timer{FlowName: r.meta.FlowName, RunID: r.meta.RunID, Step: aw.Step}
		switch {
		case aw.Deadline > 0 && aw.Deadline <= now:
			t.Kind, t.Due = timerTimeout, aw.Deadline
		case aw.Type == "time" && aw.ResumeAt <= now:
			t.Kind, t.Due = timerAwait, aw.ResumeAt
		default:
			continue
		}
		out = append(out, t)
	}
	return out
}

func (r *run) waiting() bool {
	for _, s := range r.state.Steps {
		if s.Status != stepAwaiting {
			continue
		}
		if aw := r.state.Awaits[s.Await]; aw != nil && aw.Status == awaitWaiting {
			return true
		}
	}
	return false
}

// queuedJobs reads the jobs of r's queued steps by step (a missing job is
// absent) and reports whether a worker holds one under a live lease.
func (e *Engine) queuedJobs(ctx context.Context, r *run, now int64) (map[string]store.Job, bool, error) {
	jobs := map[string]store.Job{}
	for name, s := range r.state.Steps {
		if s.Status != stepQueued {
			continue
		}
		j, err := e.st.Job(ctx, store.JobRef{Queue: s.Queue, ID: store.JobID(r.meta.RunID, name)})
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		if j.Lease != "" && j.LeaseUntil > now {
			return nil, true, nil
		}
		jobs[name] = j
	}
	return jobs, false, nil
}

// stall writes flow.stalled ({reason, previousStatus, stalledAt}, the fields
// the v0.4/v0.5 UI reads, with idleMs and the re-dispatched steps) and
// re-dispatches r's steps: each queued step's job is queued again (its lost
// or expired delivery does not count as an attempt, so the step's retry
// policy still has all its tries), and each retrying step's retry timer is
// made due now.
func (e *Engine) stall(ctx context.Context, r *run, d *flows.Definition, jobs map[string]store.Job, idle int64, after time.Duration, now int64) error {
	u, err := r.update()
	if err != nil {
		return err
	}
	var steps []string
	for name, s := range r.state.Steps {
		switch s.Status {
		case stepQueued:
			j, ok := jobs[name]
			if !ok {
				j = store.Job{ID: store.JobID(r.meta.RunID, name), Queue: s.Queue, FlowName: r.meta.FlowName, RunID: r.meta.RunID,
					Step: name, Input: stepInput(d, r, name), Attempt: max(s.Attempt, 1)}
			}
			j.Lease, j.LeaseUntil, j.ReadyAt = "", 0, now
			u.Enqueue = append(u.Enqueue, j)
		case stepRetrying:
			t := retryTimer(r, name)
			t.Due = now
			u.SetTimers = append(u.SetTimers, t)
		default:
			continue
		}
		steps = append(steps, name)
	}
	slices.Sort(steps)
	u.Events = []event.Event{flowEvent(r, "flow.stalled", "", map[string]any{
		"idleMs":         idle,
		"reason":         fmt.Sprintf("no event for %s, no pending await and no leased job", after),
		"previousStatus": r.meta.Status,
		"stalledAt":      isoMS(now),
		"steps":          steps,
	})}
	_, err = e.commit(ctx, r, u)
	return err
}
