package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
	// ctx is the job's: the step's events are sent under it.
	ctx context.Context

	// mu guards what follows. started is set once step.started is handed
	// to a report, which it goes first in (see startDelay); queued are the
	// emits made while step.started waits: they wait with it. pending are
	// the events not sent yet, which one sender at a time (draining, open
	// while it runs) sends in order, in batches. closed is set once the
	// outcome is being reported: events after it are refused.
	mu       sync.Mutex
	started  bool
	queued   []event
	pending  []pending
	draining chan struct{}
	closed   bool
	// encodeErr is the first value of the step that could not be encoded:
	// the step fails with it, whether or not the handler returned it.
	encodeErr error
	// freedOn is the channel that acknowledged the job's outcome with
	// next: nqd counted the slot free there.
	freedOn *chConn
}

// pending is an event waiting to be sent; done, when not nil, gets the
// outcome of its batch.
type pending struct {
	ev   event
	done chan error
}

// startDelay is how long step.started waits to go with the step's first
// report (a log, an emit, the complete) before it is sent alone: a quick
// step then costs one call after its claim instead of two. Emits made
// meanwhile wait with it, so a step that emits and returns at once costs
// one call too: nqd decides the emits in the completion's own write.
const startDelay = 100 * time.Millisecond

// A batch of events stops growing at maxBatch events or maxBatchBytes of
// data (half of nqd's default body limit), so that one large event does not
// sink the events around it.
const (
	maxBatch      = 100
	maxBatchBytes = 512 << 10
)

// errDone refuses an event of a step whose outcome is being reported.
var errDone = errors.New("worker: the step's outcome is reported already")

// handler finds the handler of j: the one keyed by its flow and step
// ("flow/step") first, then the one keyed by its step alone.
func (w *worker) handler(j Job) Handler {
	if hd := w.handlers[j.FlowName+"/"+j.Step]; hd != nil {
		return hd
	}
	return w.handlers[j.Step]
}

// runJob runs j under jobs: heartbeats from the claim until the final
// report is acknowledged, the handler, then complete or fail, sent under
// reports. While claiming lasts, the outcome asks for the slot's next job:
// a completion over HTTP claims it, and runJob returns it; over the channel
// the completion's ack brings it (nextInAck) or nqd offers it, and freedOn
// is the channel that acknowledged the outcome.
func (w *worker) runJob(claiming, jobs, reports context.Context, j Job) (next *Job, freedOn *chConn) {
	jobCtx, cancel := context.WithCancelCause(jobs)
	defer cancel(nil)
	h := &held{job: j, c: w.c, log: w.log.With("run", j.RunID, "step", j.Step, "attempt", j.Attempt), ctx: jobCtx}
	h.leaseEnd.Store(j.LeaseEnd)
	// Heartbeats outlive the handler: a report being retried needs the
	// lease kept alive as much as the running step does.
	beatCtx, stopBeats := context.WithCancel(reports)
	beats := make(chan struct{})
	go func() {
		defer close(beats)
		h.heartbeats(beatCtx, cancel)
	}()
	defer func() { stopBeats(); <-beats }()
	// No sender of the job's events outlives it.
	defer h.flush()

	sc := &StepContext{Job: j, h: h, ctx: jobCtx}
	starter := time.AfterFunc(startDelay, func() { _ = h.add(event{Kind: "step.started"}, false) })
	defer starter.Stop()
	type outcome struct {
		result any
		err    error
	}
	var o outcome
	stopped := false
	if hd := w.handler(j); jobs.Err() != nil {
		// A completion brought the job once the grace period was over.
		stopped = true
	} else if hd == nil {
		o.err = Permanent(fmt.Errorf("no handler for step %q of flow %q", j.Step, j.FlowName))
	} else {
		out := make(chan outcome, 1)
		go func() {
			var o outcome
			o.result, o.err = safeRun(jobCtx, hd, sc)
			out <- o
		}()
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
	}
	starter.Stop()
	cause := context.Cause(jobCtx)
	if errors.Is(cause, ErrCanceled) || errors.Is(cause, ErrLeaseLost) {
		h.log.Info("job dropped", "why", cause)
		return nil, nil
	}
	if stopped || (o.err != nil && errors.Is(cause, ErrStopped)) {
		o = outcome{err: ErrStopped}
	}
	h.flush()
	if o.err == nil {
		h.mu.Lock()
		o.err = h.encodeErr
		h.mu.Unlock()
	}
	var result json.RawMessage
	if o.err == nil && o.result != nil {
		var err error
		if result, err = encode("result", o.result); err != nil {
			o.err = err
		}
	}
	if o.err == nil {
		next, err := h.complete(reports, result, w.cfg.Queues, claiming.Err() == nil)
		if err == nil || !hasStatus(err, 400, 413, 422) {
			h.logOutcome("complete", err)
			if len(next) > 1 {
				// nqd never answers more than asked for; a job beyond the
				// slot is left to its lease rather than run without one.
				w.log.Error("nqd answered more jobs than asked for", "asked", 1, "got", len(next))
			}
			if len(next) > 0 {
				return &next[0], h.freedOn
			}
			return nil, h.freedOn
		}
		// nqd refused the result (too large, say): the step fails with the
		// reason rather than leave the job to its lease.
		o.err = Permanent(fmt.Errorf("complete refused: %w", err))
	}
	var perm *PermanentError
	h.logOutcome("fail", h.fail(reports, o.err.Error(), !errors.As(o.err, &perm), claiming.Err() == nil))
	return nil, h.freedOn
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

// Heartbeats go every third of what is left of the lease, so that two may
// fail before it ends, and at least every maxBeat; minBeat bounds them from
// below once the lease seems over (a clock that differs from nqd's, say).
const (
	maxBeat = 10 * time.Second
	minBeat = 100 * time.Millisecond
)

// beatIn is how long until the job's next heartbeat.
func (h *held) beatIn() time.Duration {
	return min(max(time.Until(time.UnixMilli(h.leaseEnd.Load()))/3, minBeat), maxBeat)
}

// heartbeats extends the lease until ctx ends; when nqd says the job is
// gone it cancels the job with the reason and stops.
func (h *held) heartbeats(ctx context.Context, cancel context.CancelCauseFunc) {
	retry := newBackOff()
	t := time.NewTimer(h.beatIn())
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
		_, err := h.c.report(ctx, h.job, "/heartbeat", map[string]any{"lease": h.job.Lease}, "", false, &beat)
		switch {
		case err == nil && beat.Canceled:
			cancel(ErrCanceled)
			return
		case err == nil:
			h.leaseEnd.Store(beat.LeaseUntil.UnixMilli())
			retry.Reset()
			t.Reset(h.beatIn())
		case hasStatus(err, 409):
			cancel(ErrLeaseLost)
			return
		case ctx.Err() == nil:
			// Sooner than usual: the lease lasts several of these.
			h.log.Warn("heartbeat failed", "err", err)
			t.Reset(min(retry.NextBackOff(), h.beatIn()))
		}
	}
}

// event is one progress event of the protocol, its data encoded when the
// step made it.
type event struct {
	Kind string          `json:"kind"`
	Data json.RawMessage `json:"data,omitempty"`
}

// encode encodes a value the step reports as JSON; what it cannot encode
// is an *EncodeError naming field.
func encode(field string, v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, &EncodeError{Field: field, Err: err}
	}
	return b, nil
}

// newEvent encodes an event of kind with data, recording an encoding
// error against the job so that the step fails with it.
func (h *held) newEvent(kind, field string, data any) (event, error) {
	b, err := encode(field, data)
	if err != nil {
		h.mu.Lock()
		if h.encodeErr == nil {
			h.encodeErr = err
		}
		h.mu.Unlock()
		return event{}, err
	}
	return event{Kind: kind, Data: b}, nil
}

// add queues ev to be sent, preceded by step.started and the emits queued
// with it when they are not handed to a report yet; with wait it returns
// the outcome of ev's batch, otherwise at once.
func (h *held) add(ev event, wait bool) error {
	var done chan error
	if wait {
		done = make(chan error, 1)
	}
	h.mu.Lock()
	switch {
	case h.closed:
		h.mu.Unlock()
		return errDone
	case ev.Kind == "step.started" && h.started:
		h.mu.Unlock()
		return nil
	case !h.started:
		h.started = true
		batch := append([]event{{Kind: "step.started"}}, h.queued...)
		h.queued = nil
		for _, e := range batch {
			h.pending = append(h.pending, pending{ev: e})
		}
		if ev.Kind == "step.started" {
			h.pending[len(h.pending)-len(batch)].done = done
			break
		}
		fallthrough
	default:
		h.pending = append(h.pending, pending{ev: ev, done: done})
	}
	if h.draining == nil {
		h.draining = make(chan struct{})
		go h.drain(h.draining)
	}
	h.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case err := <-done:
		return err
	case <-h.ctx.Done():
		return context.Cause(h.ctx)
	}
}

// drain sends the pending events in order, as many in one call as have
// queued up, until none is left; then it closes done.
func (h *held) drain(done chan struct{}) {
	for {
		h.mu.Lock()
		n, size := 0, 0
		for n < len(h.pending) && n < maxBatch {
			size += len(h.pending[n].ev.Data)
			if n > 0 && size > maxBatchBytes {
				break
			}
			n++
		}
		if n == 0 {
			h.draining = nil
			h.mu.Unlock()
			close(done)
			return
		}
		batch := h.pending[:n:n]
		h.pending = h.pending[n:]
		h.mu.Unlock()
		evs := make([]event, len(batch))
		waited := false
		for i, p := range batch {
			evs[i] = p.ev
			waited = waited || p.done != nil
		}
		err := h.send(h.ctx, "/events", map[string]any{"lease": h.job.Lease, "events": evs}, newKey(), false, nil)
		if err != nil && evs[0].Kind == "step.started" && hasStatus(err, 400, 413, 422) {
			// nqd refused the call and stored none of it: step.started
			// goes with the next report or the outcome.
			h.mu.Lock()
			h.started = false
			h.mu.Unlock()
		}
		if err != nil && !waited {
			h.log.Warn("events not reported", "err", err)
		}
		for _, p := range batch {
			if p.done != nil {
				p.done <- err
			}
		}
	}
}

// flush waits until every event made so far was sent (or given up on) and
// refuses those made from then on.
func (h *held) flush() {
	for {
		h.mu.Lock()
		d := h.draining
		if d == nil {
			h.closed = true
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		<-d
	}
}

// emit queues ev, an emit, to go with step.started while that waits (see
// startDelay), and sends it at once otherwise.
func (h *held) emit(ev event) error {
	h.mu.Lock()
	if !h.started && !h.closed {
		h.queued = append(h.queued, ev)
		h.mu.Unlock()
		return nil
	}
	h.mu.Unlock()
	return h.add(ev, true)
}

// unsent is what goes first in the job's outcome: step.started and the
// emits queued with it, when they are not handed to a report yet.
func (h *held) unsent() []event {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started {
		return nil
	}
	return append([]event{{Kind: "step.started"}}, h.queued...)
}

// finish sends the job's outcome, complete or fail, once its events are
// sent, with step.started and the queued emits when they are not stored
// yet, and decodes the answer into out. A failure takes no emits: they are
// reported first.
func (h *held) finish(ctx context.Context, call string, body map[string]any, next bool, out any) error {
	h.flush()
	evs := h.unsent()
	if call == "/fail" && len(evs) > 1 {
		if err := h.send(ctx, "/events", map[string]any{"lease": h.job.Lease, "events": evs}, newKey(), false, nil); err != nil {
			h.log.Warn("emits before the failure not reported", "err", err)
			evs = evs[:1] // step.started alone
		} else {
			evs = nil
		}
	}
	body["lease"] = h.job.Lease
	if len(evs) > 0 {
		body["events"] = evs
	}
	return h.send(ctx, call, body, "", next, out)
}

// nextJobWait is how long a completion's claim waits for a job when none is
// ready: long enough that a run started right after this one completed (by
// a caller that waits for each run before it starts the next) is handed to
// the slot in its start's own write, short enough that an idle slot is free
// again at once.
const nextJobWait = 50 * time.Millisecond

// complete completes the job with result (nil for none); with claim it
// also claims the next job of queues, which it returns.
func (h *held) complete(ctx context.Context, result json.RawMessage, queues []string, claim bool) ([]Job, error) {
	body := map[string]any{}
	if result != nil {
		body["result"] = result
	}
	if claim {
		body["claim"] = map[string]any{"queues": queues, "max": 1, "waitMs": nextJobWait.Milliseconds()}
	}
	var ans struct{ Jobs []Job }
	err := h.finish(ctx, "/complete", body, claim, &ans)
	return ans.Jobs, err
}

func (h *held) fail(ctx context.Context, msg string, retriable, next bool) error {
	const maxError = 4096 // nqd's limit on a failure's message
	if len(msg) > maxError {
		msg = msg[:maxError]
	}
	return h.finish(ctx, "/fail", map[string]any{"error": msg, "retriable": retriable}, next, nil)
}

// send posts a report about the job, retrying with backoff and jitter while
// the failure may mend, ctx lasts and the lease lasts: each report is safe
// to repeat (docs/worker-protocol.md), and nqd keeps the lease across its
// restarts.
func (h *held) send(ctx context.Context, call string, body map[string]any, key string, next bool, out any) error {
	op := func() (struct{}, error) {
		ch, err := h.c.report(ctx, h.job, call, body, key, next, out)
		if err == nil {
			if next && ch != nil {
				h.freedOn = ch
			}
			return struct{}{}, nil
		}
		if ctx.Err() != nil || !retriable(err) {
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
	// The lease and ctx bound the retries, not a total time of their own.
	_, err := backoff.Retry(ctx, op, backoff.WithBackOff(newBackOff()), backoff.WithNotify(notify), backoff.WithMaxElapsedTime(0))
	return err
}
