package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// held is a job the worker holds: its lease's end as last heard from nqd,
// and the reports about it.
type held struct {
	job      Job
	c        *client
	log      *slog.Logger
	leaseEnd atomic.Int64 // epoch ms

	// mu orders the job's reports; started is set once step.started is
	// stored, which goes with the first report (see startDelay). queued
	// are the emits made while step.started waits: they wait with it, and
	// go with the first report or the outcome. holdEmits says whether they
	// may (not for an nqd that refuses emits in a completion).
	mu        sync.Mutex
	started   bool
	queued    []event
	holdEmits bool
}

// startDelay is how long step.started waits to go with the step's first
// report (a log, an emit, the complete) before it is sent alone: a quick
// step then costs one call after its claim instead of two. Emits made
// meanwhile wait with it, so a step that emits and returns at once costs
// one call too: nqd decides the emits in the completion's own write.
const startDelay = 100 * time.Millisecond

// runJob runs j under jobs: heartbeats from the claim until the final
// report is acknowledged, the handler, then complete or fail. While claiming
// lasts, the completion claims the slot's next job, which runJob returns.
func (w *worker) runJob(claiming, jobs context.Context, j Job) (next *Job) {
	h := &held{job: j, c: w.c, log: w.log.With("run", j.Run, "step", j.Step, "attempt", j.Attempt), holdEmits: !w.emitsApart.Load()}
	h.leaseEnd.Store(j.LeaseEnd)
	jobCtx, cancel := context.WithCancelCause(jobs)
	defer cancel(nil)
	// Heartbeats outlive the handler: a report being retried needs the
	// lease kept alive as much as the running step does.
	beatCtx, stopBeats := context.WithCancel(context.WithoutCancel(jobs))
	beats := make(chan struct{})
	go func() {
		defer close(beats)
		h.heartbeats(beatCtx, w.cfg.Heartbeat, cancel)
	}()
	defer func() { stopBeats(); <-beats }()

	sc := &StepContext{Job: j, h: h, ctx: jobCtx}
	starter := time.AfterFunc(startDelay, func() {
		if err := h.report(jobCtx); err != nil {
			h.log.Warn("step.started not reported", "err", err)
		}
	})
	defer starter.Stop()
	type outcome struct {
		result any
		err    error
	}
	out := make(chan outcome, 1)
	go func() {
		var o outcome
		if hd := w.handlers[j.Step]; hd == nil {
			o.err = Permanent(fmt.Errorf("no handler for step %q", j.Step))
		} else {
			o.result, o.err = safeRun(jobCtx, hd, sc)
		}
		out <- o
	}()
	var o outcome
	stopped := false
	select {
	case o = <-out:
	case <-jobCtx.Done():
		select {
		case o = <-out:
		case <-jobs.Done():
			// Past the grace period: fail the job now rather than
			// wait for a handler that may not return.
			stopped = true
		}
	}
	// Reports after the handler use a context of their own: the job's
	// is done once the worker stops, and the outcome must still reach nqd.
	final := context.WithoutCancel(jobCtx)
	cause := context.Cause(jobCtx)
	if errors.Is(cause, ErrCanceled) || errors.Is(cause, ErrLeaseLost) {
		h.log.Info("job dropped", "why", cause)
		return nil
	}
	if stopped || (o.err != nil && errors.Is(cause, ErrStopped)) {
		o = outcome{err: ErrStopped}
	}
	if o.err == nil {
		claim := claiming.Err() == nil && !w.oldServer.Load()
		next, err := h.complete(final, o.result, w.cfg.Queues, claim)
		if h.emitsRefused(err) {
			// An nqd from before completions took emits names them in its
			// refusal: they go through the events call, then the
			// completion again, and this worker's emits go at once from
			// now on.
			w.emitsApart.Store(true)
			if err = h.report(final); err == nil {
				next, err = h.complete(final, o.result, w.cfg.Queues, claim)
			}
		}
		if claim && hasStatus(err, 400) {
			// An nqd from before completions claimed refuses the field,
			// whether or not it names it: complete plainly. Should that go
			// through, the field was the cause, and completions claim no
			// more; should it be refused too, the result was.
			next, err = h.complete(final, o.result, nil, false)
			if err == nil {
				w.oldServer.Store(true)
			}
		}
		if err == nil || !hasStatus(err, 400, 413, 422) {
			h.logOutcome("complete", err)
			if len(next) > 1 {
				// nqd never answers more than asked for; a job beyond the
				// slot is left to its lease rather than run without one.
				w.log.Error("nqd answered more jobs than asked for", "asked", 1, "got", len(next))
			}
			if len(next) > 0 {
				return &next[0]
			}
			return nil
		}
		// nqd refused the result (too large, not JSON): the step fails
		// with the reason rather than leave the job to its lease.
		o.err = Permanent(fmt.Errorf("complete refused: %w", err))
	}
	var perm *PermanentError
	h.logOutcome("fail", h.fail(final, o.err.Error(), !errors.As(o.err, &perm)))
	return nil
}

func (h *held) logOutcome(call string, err error) {
	switch {
	case err == nil:
	case hasStatus(err, 409):
		h.log.Info(call+" refused: the job is no longer this worker's", "err", err)
	default:
		h.log.Error(call+" not reported", "err", err)
	}
}

func safeRun(ctx context.Context, h Handler, sc *StepContext) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return h(ctx, sc)
}

// heartbeats extends the lease every period until ctx ends; when nqd says
// the job is gone it cancels the job with the reason and stops.
func (h *held) heartbeats(ctx context.Context, period time.Duration, cancel context.CancelCauseFunc) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var beat struct {
			LeaseUntil time.Time `json:"leaseUntil"`
			Canceled   bool      `json:"canceled"`
		}
		err := h.c.post(ctx, jobPath(h.job)+"/heartbeat", map[string]string{"lease": h.job.Lease}, "", &beat)
		switch {
		case err == nil && beat.Canceled:
			cancel(ErrCanceled)
			return
		case err == nil:
			h.leaseEnd.Store(beat.LeaseUntil.UnixMilli())
		case hasStatus(err, 409):
			cancel(ErrLeaseLost)
			return
		case ctx.Err() == nil:
			// The next tick tries again; the lease lasts several of them.
			h.log.Warn("heartbeat failed", "err", err)
		}
	}
}

// event is one progress event of the protocol.
type event struct {
	Kind string `json:"kind"`
	Data any    `json:"data,omitempty"`
}

// report sends progress events, preceded by step.started and the queued
// emits when they are not stored yet, under one Idempotency-Key for all its
// retries.
func (h *held) report(ctx context.Context, evs ...event) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	evs = append(h.unsent(), evs...)
	if len(evs) == 0 {
		return nil
	}
	err := h.send(ctx, "/events", map[string]any{"lease": h.job.Lease, "events": evs}, newKey(), nil)
	if err == nil {
		h.started, h.queued = true, nil
	}
	return err
}

// unsent is what goes first in the job's next report: step.started and the
// emits queued with it, when they are not stored yet. Callers hold mu.
func (h *held) unsent() []event {
	if h.started {
		return nil
	}
	return append([]event{{Kind: "step.started"}}, h.queued...)
}

// emit queues ev, an emit, to go with step.started while that waits (see
// startDelay), and sends it at once otherwise.
func (h *held) emit(ctx context.Context, ev event) error {
	h.mu.Lock()
	if !h.started && h.holdEmits {
		h.queued = append(h.queued, ev)
		h.mu.Unlock()
		return nil
	}
	h.mu.Unlock()
	return h.report(ctx, ev)
}

// emitsRefused reports whether err is nqd refusing the emits a completion
// carried, naming them in its fields, as an nqd from before completions
// took emits does.
func (h *held) emitsRefused(err error) bool {
	var se *StatusError
	if !errors.As(err, &se) || se.Status != http.StatusBadRequest {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started || len(h.queued) == 0 {
		return false
	}
	for f := range se.Fields {
		if isKindField(f) {
			return true
		}
	}
	return false
}

// isKindField reports whether a refusal's field names an event's kind,
// events[i].kind, as an nqd refusing a kind in that call names it (an emit
// without a name is events[i].data.event instead).
func isKindField(f string) bool {
	return strings.HasPrefix(f, "events[") && strings.HasSuffix(f, "].kind")
}

// finish sends the job's outcome, complete or fail, with step.started and
// the queued emits when they are not stored yet, and decodes the answer
// into out. A failure takes no emits: they are reported first.
func (h *held) finish(ctx context.Context, call string, body map[string]any, out any) error {
	h.mu.Lock()
	emits := !h.started && len(h.queued) > 0
	h.mu.Unlock()
	if call == "/fail" && emits {
		if err := h.report(ctx); err != nil {
			h.log.Warn("emits before the failure not reported", "err", err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	body["lease"] = h.job.Lease
	if evs := h.unsent(); len(evs) > 0 {
		if call == "/fail" {
			evs = evs[:1] // the emits could not be reported: step.started alone
		}
		body["events"] = evs
	}
	err := h.send(ctx, call, body, "", out)
	if err == nil {
		h.started, h.queued = true, nil
	}
	return err
}

// nextJobWait is how long a completion's claim waits for a job when none is
// ready: long enough that a run started right after this one completed (by
// a caller that waits for each run before it starts the next) is handed to
// the slot in its start's own write, short enough that an idle slot is free
// again at once.
const nextJobWait = 50 * time.Millisecond

// complete completes the job with result; with claim it also claims the
// next job of queues, which it returns.
func (h *held) complete(ctx context.Context, result any, queues []string, claim bool) ([]Job, error) {
	body := map[string]any{}
	if result != nil {
		body["result"] = result
	}
	if claim {
		body["claim"] = map[string]any{"queues": queues, "max": 1, "waitMs": nextJobWait.Milliseconds()}
	}
	var ans struct{ Jobs []Job }
	err := h.finish(ctx, "/complete", body, &ans)
	return ans.Jobs, err
}

func (h *held) fail(ctx context.Context, msg string, retriable bool) error {
	const maxError = 4096 // nqd's limit on a failure's message
	if len(msg) > maxError {
		msg = msg[:maxError]
	}
	return h.finish(ctx, "/fail", map[string]any{"error": msg, "retriable": retriable}, nil)
}

// send posts a report about the job, retrying with backoff and jitter while
// the failure may mend and the lease lasts: each report is safe to repeat
// (docs/worker-protocol.md), and nqd keeps the lease across its restarts.
func (h *held) send(ctx context.Context, call string, body any, key string, out any) error {
	op := func() (struct{}, error) {
		err := h.c.post(ctx, jobPath(h.job)+call, body, key, out)
		if err == nil {
			return struct{}{}, nil
		}
		if !retriable(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		if time.Now().UnixMilli() >= h.leaseEnd.Load() {
			return struct{}{}, backoff.Permanent(fmt.Errorf("lease ended: %w", err))
		}
		var se *StatusError
		if errors.As(err, &se) && se.RetryAfter > 0 {
			return struct{}{}, &backoff.RetryAfterError{Duration: se.RetryAfter}
		}
		return struct{}{}, err
	}
	notify := func(err error, next time.Duration) {
		h.log.Debug("report failed; trying again", "call", call, "err", err, "in", next)
	}
	_, err := backoff.Retry(ctx, op, backoff.WithBackOff(newBackOff()), backoff.WithNotify(notify))
	return err
}
