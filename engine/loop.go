package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/internal/outage"
	"github.com/nqd-dev/nqd/store"
)

// Run fires due retries every Interval until ctx ends. It first watches
// the event kinds of the stored definitions, for those stored before their
// kinds were watched.
func (e *Engine) Run(ctx context.Context) error {
	if err := e.watchStoredKinds(ctx); err != nil && ctx.Err() == nil {
		// Definitions stored through PutDefinition are watched already;
		// this only catches older ones up, so it must not stop the engine.
		e.log.Error().Err(err).Msg("watching the event kinds of stored flows failed")
	}
	tk := time.NewTicker(e.opts.Interval)
	defer tk.Stop()
	failing := outage.New(e.log, "engine tick")
	for {
		if err := e.Tick(ctx); err != nil && ctx.Err() == nil {
			failing.Failed(err)
		} else if err == nil {
			failing.Succeeded()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C:
		}
	}
}

// Tick fires the retries that are due: for each, step.retry and a new job
// for the next attempt, once, whichever instance gets the timer.
func (e *Engine) Tick(ctx context.Context) error {
	now := e.nowMS()
	// A timer taken by an instance that dies is held this long before
	// another instance takes it.
	hold := now + e.opts.Lease.Milliseconds()
	for {
		// Timers that come with an error (part of the store failed) are
		// held for this instance: they fire, and the error is returned
		// after.
		timers, err := e.st.DueTimers(ctx, now, hold, 100)
		if err != nil && len(timers) == 0 {
			return err
		}
		// Timers of kinds handed to others (schedules) are many at one
		// instant and independent of each other, so they fire side by
		// side; the engine's own keep their order.
		var handed sync.WaitGroup
		slots := make(chan struct{}, handedTimerSlots)
		for _, t := range timers {
			e.opts.Observer.TimerDue(t, time.Duration(max(now-t.Due, 0))*time.Millisecond)
			fire := func() {
				if err := e.fire(ctx, t); err != nil {
					e.log.Error().Err(err).Str("timer", t.Name()).Msg("timer not fired")
				}
			}
			if _, ok := e.timerKinds.Load(t.Kind); ok {
				slots <- struct{}{}
				handed.Go(func() { defer func() { <-slots }(); fire() })
				continue
			}
			fire()
		}
		handed.Wait()
		if err != nil || len(timers) < 100 {
			return err
		}
	}
}

// handedTimerSlots bounds the timers of handed kinds one Tick fires at
// once.
const handedTimerSlots = 16

// TimerHandler fires a due timer of a kind the engine does not own. The
// timer comes claimed as DueTimers claims it; the handler clears or moves
// it with the update that records what it did, so that the timer fires
// again, on any instance, once its hold ends if the handler did not get
// that far.
type TimerHandler func(ctx context.Context, t store.Timer) error

// HandleTimers hands the due timers of kind to h: the engine's durable
// timers, with their claims, for work beside flow runs (schedules).
func (e *Engine) HandleTimers(kind string, h TimerHandler) { e.timerKinds.Store(kind, h) }

func (e *Engine) fire(ctx context.Context, t store.Timer) error {
	if h, ok := e.timerKinds.Load(t.Kind); ok {
		return h.(TimerHandler)(ctx, t)
	}
	if t.Kind == timerAwait || t.Kind == timerTimeout {
		return e.fireAwaitTimer(ctx, t)
	}
	if t.Kind == timerEvent {
		return e.fireEventTimer(ctx, t)
	}
	d, err := e.Definition(ctx, t.FlowName)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return e.retry(ctx, func() error {
		r, err := e.readRun(ctx, t.FlowName, t.RunID)
		if errors.Is(err, store.ErrNotFound) {
			return nil // deleted with its flow's history
		}
		if err != nil {
			return err
		}
		s := r.state.Steps[t.Step]
		u, err := r.update()
		if err != nil {
			return err
		}
		u.ClearTimers = []store.Timer{t}
		if s != nil && s.Status == stepRetrying && !r.ended() && d != nil {
			if u, err = e.redispatch(r, d, t); err != nil {
				return err
			}
		}
		_, err = e.commit(ctx, r, u)
		return err
	})
}

func (e *Engine) redispatch(r *run, d *flows.Definition, t store.Timer) (store.RunUpdate, error) {
	s := r.state.Steps[t.Step]
	now := e.nowMS()
	failed := s.Attempt
	s.Status, s.Attempt = stepQueued, failed+1
	u, err := r.update()
	if err != nil {
		return u, err
	}
	delay := d.Steps[t.Step].RetryPolicy.Delay(failed).Milliseconds()
	u.ClearTimers = []store.Timer{t}
	u.Events = []event.Event{withAttempt(flowEvent(r, "step.retry", t.Step, map[string]any{
		"reason": "retry after failure", "delayMs": delay, "nextAttempt": s.Attempt,
	}), s.Attempt, map[string]any{"scheduledAt": isoMS(t.Due)})}
	u.Enqueue = []store.Job{{
		ID: store.JobID(r.meta.RunID, t.Step), Queue: s.Queue, FlowName: r.meta.FlowName, RunID: r.meta.RunID, Step: t.Step,
		Input: stepInput(d, r, t.Step), Attempt: s.Attempt, ReadyAt: now,
	}}
	return u, nil
}
