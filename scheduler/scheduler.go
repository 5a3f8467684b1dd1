// Package scheduler fires schedules: it keeps each schedule's spec and
// state as a record of the flow engine's run store and wakes it with one of
// the engine's durable timers, so a due time fires exactly once whichever
// instance takes the timer. The schedule package decides what each due time
// does; this one records it and starts the subscribed flows.
//
// A fire is two writes. The first, checked against the version of the
// schedule's record it read, appends trigger.fired (or schedule.skipped) to
// the schedule's stream, stores the new state with the fire marked pending
// and moves the timer: another instance that took the same due time is
// refused and finds it decided. The second starts the flows, each with an
// idempotency key of the due time, and clears the pending mark. An instance
// that dies between the two leaves the timer due soon, and whoever takes it
// starts the same runs again, which the engine replays: so each due time
// starts each flow once.
package scheduler

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/internal/outage"
	"github.com/nqd-dev/nqd/schedule"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/triggers"
)

// Engine is what the scheduler needs of the flow engine.
type Engine interface {
	Start(ctx context.Context, flow string, input json.RawMessage, idempotencyKey string) (engine.Started, error)
	Cancel(ctx context.Context, flow, runID, reason string) (string, error)
	HandleTimers(kind string, h engine.TimerHandler)
	// Tick fires the timers due now; Run calls it at due times, so that a
	// fire does not wait for the engine's next tick.
	Tick(ctx context.Context) error
}

// Store is where schedules are kept: the engine's run store.
type Store interface {
	UpdateRun(ctx context.Context, u store.RunUpdate) (store.AppendResult, error)
	RunMeta(ctx context.Context, flow, run string) (store.RunMeta, error)
	ListRuns(ctx context.Context, flow, status string, offset, limit int) (store.RunPage, error)
}

// Registry is the trigger registry: schedule triggers fire through it, so
// that their fires start the flows subscribed at the time, recorded as any
// trigger's fires are.
type Registry interface {
	List(ctx context.Context) ([]triggers.Trigger, error)
	Fire(ctx context.Context, name string, payload json.RawMessage, fireID string, src map[string]any) (triggers.Fired, error)
}

// Observer is told what the scheduler recorded, for metrics.
type Observer interface {
	// Fired: a due time fired (source "schedule", "now" or "backfill"),
	// late after it was planned.
	Fired(source string, late time.Duration)
	// Skipped: n due times were skipped for reason.
	Skipped(reason string, n int)
}

type nopObserver struct{}

func (nopObserver) Fired(string, time.Duration) {}
func (nopObserver) Skipped(string, int)         {}

// Stream types of schedules: a schedule trigger's, and a schedule made
// through the Nuxt Queue v0.4 routes, which is no trigger.
const (
	TriggerStream = "trigger"
	FlowStream    = "schedule"
)

// Names the scheduler keeps its records and timers under. A record is a
// run of the flow recordFlowPrefix+<stream type>, which has no definition,
// so nothing that lists flows or sweeps runs sees it.
const (
	recordFlowPrefix = flows.ReservedPrefix
	timerKind        = "schedule"
	timerStep        = "due"
	maxRetries       = 100
	// MaxBackfill bounds the due times one backfill fires.
	MaxBackfill = 1000
	// MaxList bounds the schedules List returns.
	MaxList = 1000
)

// Options tune a Scheduler.
type Options struct {
	Now    func() time.Time
	Logger zerolog.Logger
	// Registry, when set, holds the schedule triggers Run keeps in step,
	// and fires them.
	Registry Registry
	// SyncEvery is how often Run brings the schedules in step with the
	// registry's schedule triggers; default 2s.
	SyncEvery time.Duration
	// Observer is told what the scheduler recorded; default none.
	Observer Observer
	// Poll is how often a buffered due time looks whether the run it waits
	// for has ended; default 1s.
	Poll time.Duration
	// Retry is how long a fire whose flows were not all started waits
	// before another instance starts them; default 5s.
	Retry time.Duration
}

// Scheduler fires schedules. It is safe for concurrent use.
type Scheduler struct {
	eng  Engine
	st   Store
	opts Options
	log  zerolog.Logger

	// wakes are the due times Run knows of, on any instance: from the
	// records each sync reads and from this instance's own writes.
	mu    sync.Mutex
	wakes wakeHeap
	kick  chan struct{}
}

// New returns a scheduler and hands it the engine's schedule timers.
func New(eng Engine, st Store, opts Options) *Scheduler {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Observer == nil {
		opts.Observer = nopObserver{}
	}
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.Retry <= 0 {
		opts.Retry = 5 * time.Second
	}
	if opts.SyncEvery <= 0 {
		opts.SyncEvery = 2 * time.Second
	}
	s := &Scheduler{eng: eng, st: st, opts: opts, log: opts.Logger, kick: make(chan struct{}, 1)}
	eng.HandleTimers(timerKind, s.fire)
	return s
}

// Target is a flow a schedule starts, with its input.
type Target struct {
	FlowName string          `json:"flow"`
	Input    json.RawMessage `json:"input,omitempty"`
}

// RunRef names a run a schedule started.
type RunRef struct {
	FlowName string `json:"flow"`
	RunID    string `json:"run"`
}

// Schedule is a schedule as stored: what it is, what it starts, and the
// state its fires left.
type Schedule struct {
	// Stream is where its events go: trigger:<name> for a schedule
	// trigger, schedule:<id> for a v0.4 flow schedule.
	Stream    store.Context   `json:"-"`
	Spec      schedule.Spec   `json:"spec"`
	Targets   []Target        `json:"targets,omitempty"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
	CreatedAt int64           `json:"createdAt"`
	State     schedule.State  `json:"state"`
	// NextRun is the next due time as planned (jitter included), 0 when
	// none (paused).
	NextRun   int64 `json:"nextRun,omitempty"`
	LastRun   int64 `json:"lastRun,omitempty"` // when it last fired
	RunCount  int   `json:"runCount"`          // due times fired
	FailCount int   `json:"failCount"`         // fires of which a flow did not start
	// LastRuns are the runs its latest fire started, which the overlap
	// policy looks at.
	LastRuns []RunRef `json:"lastRuns,omitempty"`
	// Pending are fires recorded whose flows are not all started yet.
	Pending []Pending `json:"pending,omitempty"`
	// Cancel are runs cancel_previous cancels before Pending start.
	Cancel []RunRef `json:"cancel,omitempty"`
	// Once marks a one-time schedule (v0.4's delay): it fires its first
	// due time and then stays paused.
	Once bool `json:"once,omitempty"`
	// wake is when the timer is due.
	Wake    int64 `json:"wake,omitempty"`
	Deleted bool  `json:"deleted,omitempty"`
}

// Pending is a fire whose flows are to be started.
type Pending struct {
	Due int64  `json:"due"`
	Key string `json:"key"` // the start's idempotency key, per due time
}

// Name is the schedule's name: its trigger's, or its v0.4 id.
func (s *Schedule) Name() string { return s.Stream.ID }

func recordFlow(c store.Context) string { return recordFlowPrefix + c.Type }

func timer(c store.Context, due int64) store.Timer {
	return store.Timer{Kind: timerKind, FlowName: recordFlow(c), RunID: c.ID, Step: timerStep, Due: due}
}

// dueKey is the idempotency key of the starts of due time d: the same for
// a scheduled fire and a backfill of d, so d starts its flows once.
func dueKey(d int64) string { return "due:" + strconv.FormatInt(d, 10) }

// errGone: the schedule does not exist (or was deleted).
var errGone = fmt.Errorf("scheduler: schedule: %w", store.ErrNotFound)

// change is one decision about a schedule: it changes the record in place
// (found is false when there is none, and sc is then zero) and returns the
// events that record the change. errGone leaves everything as it is.
type change func(sc *Schedule, found bool, now time.Time) ([]event.Event, error)

// update reads c's record, applies f and writes the result checked against
// the version it read, deciding again after a lost race. The timer moves to
// the record's Wake, or is due after Retry while fires are pending.
func (s *Scheduler) update(ctx context.Context, c store.Context, f change) (*Schedule, error) {
	for range maxRetries {
		m, err := s.st.RunMeta(ctx, recordFlow(c), c.ID)
		found := err == nil
		sc := &Schedule{}
		switch {
		case errors.Is(err, store.ErrNotFound):
			m = store.RunMeta{}
		case err != nil:
			return nil, err
		default:
			if err := json.Unmarshal(m.State, sc); err != nil {
				return nil, fmt.Errorf("scheduler: record of %s: %w", c, err)
			}
		}
		sc.Stream = c
		now := s.opts.Now()
		evs, err := f(sc, found && !sc.Deleted, now)
		if err != nil {
			return nil, err
		}
		body, err := json.Marshal(sc)
		if err != nil {
			return nil, err
		}
		status := store.RunRunning
		if sc.Deleted {
			status = store.RunCancelled
		}
		u := store.RunUpdate{
			Meta:       store.RunMeta{FlowName: recordFlow(c), RunID: c.ID, Status: status, StartedAt: sc.CreatedAt, Version: m.Version, State: body},
			PrevStatus: m.Status,
			Events:     evs,
			Stream:     c,
		}
		switch wake := sc.Wake; {
		case len(sc.Pending) > 0 || len(sc.Cancel) > 0:
			u.SetTimers = []store.Timer{timer(c, now.Add(s.opts.Retry).UnixMilli())}
		case wake > 0 && !sc.Deleted:
			u.SetTimers = []store.Timer{timer(c, wake)}
		default:
			u.ClearTimers = []store.Timer{timer(c, 0)}
		}
		_, err = s.st.UpdateRun(ctx, u)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, t := range u.SetTimers {
			s.wake(t.Due)
		}
		s.observe(evs)
		return sc, nil
	}
	return nil, fmt.Errorf("scheduler: %s changed %d times while deciding: %w", c, maxRetries, store.ErrConflict)
}

// observe tells the observer of the fires and skips a write recorded; a
// decision retried after a lost race counts once, when it is written.
func (s *Scheduler) observe(evs []event.Event) {
	for _, ev := range evs {
		var d struct {
			Source     string `json:"source"`
			LatenessMs int64  `json:"latenessMs"`
			Reason     string `json:"reason"`
			Count      int    `json:"count"`
		}
		if json.Unmarshal(ev.Data, &d) != nil {
			continue
		}
		switch ev.Kind {
		case "schedule.fired":
			s.opts.Observer.Fired(d.Source, time.Duration(d.LatenessMs)*time.Millisecond)
		case "schedule.skipped":
			s.opts.Observer.Skipped(d.Reason, d.Count)
		}
	}
}

// compile compiles sc's spec, seeded by its stream so two schedules'
// jitters differ.
func compile(sc *Schedule) (*schedule.Schedule, error) {
	return schedule.Compile(sc.Spec, sc.Stream.String())
}

// Put creates the schedule c or changes its spec, targets and metadata. A
// changed spec starts counting from now: intervals from now, and the due
// times before now are not misfires. A new schedule with runImmediately
// fires at once. Errors: an *nqd.Error naming a bad field of spec, store
// errors.
func (s *Scheduler) Put(ctx context.Context, c store.Context, spec schedule.Spec, targets []Target, metadata json.RawMessage) (*Schedule, error) {
	return s.put(ctx, c, spec, targets, metadata, false)
}

// PutOnce creates the one-time schedule c, which fires once, after delay
// (at least a second; a fraction of a second is rounded up), and then stays
// paused. Errors: as Put's.
func (s *Scheduler) PutOnce(ctx context.Context, c store.Context, delay time.Duration, targets []Target, metadata json.RawMessage) (*Schedule, error) {
	spec := schedule.Spec{Interval: delay.Round(time.Second).Seconds(), Overlap: schedule.OverlapAllow}
	if delay > 0 && delay < time.Second {
		spec.Interval = 1
	}
	return s.put(ctx, c, spec, targets, metadata, true)
}

func (s *Scheduler) put(ctx context.Context, c store.Context, spec schedule.Spec, targets []Target, metadata json.RawMessage, once bool) (*Schedule, error) {
	if !c.Valid() {
		return nil, fmt.Errorf("scheduler: schedule %s: %w", c, store.ErrInvalid)
	}
	if _, err := schedule.Compile(spec, c.String()); err != nil {
		return nil, err
	}
	sc, err := s.update(ctx, c, func(sc *Schedule, found bool, now time.Time) ([]event.Event, error) {
		fresh := !found
		if fresh {
			*sc = Schedule{Stream: c, CreatedAt: now.UnixMilli(), State: schedule.Start(now)}
		} else if !sameSpec(sc.Spec, spec) {
			paused := sc.State.Paused
			sc.State = schedule.Start(now)
			sc.State.Paused = paused
		}
		sc.Spec, sc.Targets, sc.Metadata, sc.Once = spec, targets, metadata, once
		cs, err := compile(sc)
		if err != nil {
			return nil, err
		}
		var evs []event.Event
		if fresh && spec.RunImmediately {
			evs = append(evs, s.record(sc, cs, now, now, now, "immediate"))
		}
		s.plan(sc, cs, now)
		return append(evs, s.event(sc, "schedule.set", map[string]any{"spec": cs.Spec(), "nextRun": isoMS(sc.NextRun)})), nil
	})
	if err != nil {
		return nil, err
	}
	return sc, s.settle(ctx, c)
}

func sameSpec(a, b schedule.Spec) bool { return a == b }

// plan sets sc's next wake from its state.
func (s *Scheduler) plan(sc *Schedule, cs *schedule.Schedule, now time.Time) {
	sc.Wake, sc.NextRun = 0, 0
	if w := cs.Wake(sc.State); !w.IsZero() {
		sc.NextRun, sc.Wake = w.UnixMilli(), max(w.UnixMilli(), now.UnixMilli())
	}
}

// record marks due time due fired at now: it adds the pending start and
// returns the schedule.fired event. A schedule trigger's fire then fires
// the trigger, which records its own trigger.fired.
func (s *Scheduler) record(sc *Schedule, cs *schedule.Schedule, due, planned, now time.Time, source string) event.Event {
	sc.Pending = append(sc.Pending, Pending{Due: due.UnixMilli(), Key: dueKey(due.UnixMilli())})
	sc.RunCount++
	sc.LastRun = now.UnixMilli()
	late := max(now.Sub(planned), 0)
	flows := make([]string, len(sc.Targets))
	for i, t := range sc.Targets {
		flows[i] = t.FlowName
	}
	return s.event(sc, "schedule.fired", map[string]any{
		"source": source, "dueAt": isoMS(due.UnixMilli()), "plannedAt": isoMS(planned.UnixMilli()),
		"firedAt": isoMS(now.UnixMilli()), "latenessMs": late.Milliseconds(),
		// Nuxt Queue's trigger.fired carries these two.
		"scheduledAt": due.UnixMilli(), "timezone": cs.Spec().Timezone,
		"flows": flows,
	})
}

func (s *Scheduler) event(sc *Schedule, kind string, data map[string]any) event.Event {
	ev := event.Event{Kind: kind, Subject: sc.Stream.ID}
	if sc.Stream.Type == TriggerStream {
		ev.Trigger = sc.Stream.ID
	}
	ev.Data, _ = json.Marshal(data)
	return ev
}

func isoMS(ms int64) any {
	if ms == 0 {
		return nil
	}
	return time.UnixMilli(ms).UTC().Format(event.TimeFormat)
}

// fire handles a due schedule timer: it decides the due times up to now,
// records them, then starts what they fired.
func (s *Scheduler) fire(ctx context.Context, t store.Timer) error {
	c := store.Context{Type: t.FlowName[len(recordFlowPrefix):], ID: t.RunID}
	if t.FlowName[:min(len(t.FlowName), len(recordFlowPrefix))] != recordFlowPrefix || !c.Valid() {
		return fmt.Errorf("scheduler: timer %s names no schedule", t.Name())
	}
	_, err := s.update(ctx, c, func(sc *Schedule, found bool, now time.Time) ([]event.Event, error) {
		if !found {
			sc.Deleted = true // clears the timer
			return nil, nil
		}
		if len(sc.Pending) > 0 || len(sc.Cancel) > 0 {
			// A fire recorded before is not started yet: settle starts it
			// once this write moved the timer off.
			return nil, nil
		}
		cs, err := compile(sc)
		if err != nil {
			return nil, err
		}
		running, err := s.running(ctx, sc.LastRuns)
		if err != nil {
			return nil, err
		}
		p := cs.Step(sc.State, now, running)
		if sc.Once && len(p.Fires) > 0 {
			p.Fires, p.Skips, p.Wake, p.WaitsForRun = p.Fires[:1], nil, time.Time{}, false
			p.State = schedule.Pause(p.State)
		}
		sc.State = p.State
		var evs []event.Event
		if p.Cancel {
			sc.Cancel = sc.LastRuns
		}
		for _, sk := range p.Skips {
			evs = append(evs, s.event(sc, "schedule.skipped", map[string]any{
				"reason": sk.Reason, "from": isoMS(sk.From.UnixMilli()), "through": isoMS(sk.Through.UnixMilli()),
				"count": sk.Count, "counted": sk.Counted, "decidedAt": isoMS(now.UnixMilli()),
			}))
		}
		for _, d := range p.Fires {
			evs = append(evs, s.record(sc, cs, d, cs.Planned(d), now, "schedule"))
		}
		sc.Wake, sc.NextRun = p.Wake.UnixMilli(), p.Wake.UnixMilli()
		if p.Wake.IsZero() {
			sc.Wake, sc.NextRun = 0, 0
		}
		if p.WaitsForRun {
			poll := now.Add(s.opts.Poll).UnixMilli()
			if sc.Wake == 0 || poll < sc.Wake {
				sc.Wake = poll
			}
		}
		return evs, nil
	})
	if errors.Is(err, errGone) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.settle(ctx, c)
}

// running reports whether any of runs is still going.
func (s *Scheduler) running(ctx context.Context, runs []RunRef) (bool, error) {
	for _, r := range runs {
		m, err := s.st.RunMeta(ctx, r.FlowName, r.RunID)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		if m.Status == store.RunRunning || m.Status == store.RunAwaiting {
			return true, nil
		}
	}
	return false, nil
}

// settle carries out c's pending fires: it cancels what cancel_previous
// cancels, starts each target for each pending due time (replayed by its
// key if another instance started it), and clears what it did.
func (s *Scheduler) settle(ctx context.Context, c store.Context) error {
	m, err := s.st.RunMeta(ctx, recordFlow(c), c.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var sc Schedule
	if err := json.Unmarshal(m.State, &sc); err != nil {
		return fmt.Errorf("scheduler: record of %s: %w", c, err)
	}
	if len(sc.Pending) == 0 && len(sc.Cancel) == 0 {
		return nil
	}
	for _, r := range sc.Cancel {
		if _, err := s.eng.Cancel(ctx, r.FlowName, r.RunID, "canceled by the next fire of schedule "+c.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	done := map[string]outcome{}
	var transient error
	for _, p := range sc.Pending {
		var o outcome
		if c.Type == TriggerStream {
			var err error
			o, err = s.fireTrigger(ctx, c.ID, sc.Spec, p)
			if err != nil {
				transient = err
				break
			}
			done[p.Key] = o
			continue
		}
		for _, t := range sc.Targets {
			started, err := s.eng.Start(ctx, t.FlowName, t.Input, "schedule:"+c.String()+":"+p.Key)
			switch {
			case err == nil:
				o.runs = append(o.runs, RunRef{FlowName: t.FlowName, RunID: started.FlowID})
			case isTransient(err):
				transient = err
			default:
				o.failed = true
				s.log.Warn().Err(err).Str("schedule", c.String()).Str("flow", t.FlowName).Msg("scheduled flow not started")
			}
		}
		if transient != nil {
			break
		}
		done[p.Key] = o
	}
	_, err = s.update(ctx, c, func(sc *Schedule, found bool, now time.Time) ([]event.Event, error) {
		if !found {
			return nil, errGone
		}
		sc.Cancel = nil
		var left []Pending
		for _, p := range sc.Pending {
			o, ok := done[p.Key]
			if !ok {
				left = append(left, p)
				continue
			}
			sc.LastRuns = o.runs
			if o.failed {
				sc.FailCount++
			}
		}
		sc.Pending = left
		return nil, nil
	})
	if errors.Is(err, errGone) {
		err = nil
	}
	return errors.Join(transient, err)
}

// outcome is what carrying out one pending fire did.
type outcome struct {
	runs   []RunRef
	failed bool
}

// fireTrigger fires the schedule trigger name for pending fire p, named
// by its due time so that the fire and its runs happen once.
func (s *Scheduler) fireTrigger(ctx context.Context, name string, spec schedule.Spec, p Pending) (o outcome, err error) {
	if s.opts.Registry == nil {
		o.failed = true
		return o, nil
	}
	tz := spec.Timezone
	if tz == "" {
		tz = schedule.DefaultTimezone
	}
	payload, _ := json.Marshal(map[string]any{"scheduledAt": p.Due, "timezone": tz})
	f, err := s.opts.Registry.Fire(ctx, name, payload, "schedule-"+strconv.FormatInt(p.Due, 10),
		map[string]any{"type": "schedule", "dueAt": isoMS(p.Due)})
	if err != nil {
		if isTransient(err) {
			return o, err
		}
		s.log.Warn().Err(err).Str("trigger", name).Msg("schedule trigger not fired")
		o.failed = true
		return o, nil
	}
	for flow, run := range f.Started {
		o.runs = append(o.runs, RunRef{FlowName: flow, RunID: run})
	}
	o.failed = len(f.Failed) > 0
	return o, nil
}

// isTransient tells a failed start worth retrying from one that fails the
// same way again (no such flow, bad input).
func isTransient(err error) bool {
	switch nqd.ErrorCode(err) {
	case nqd.CodeUnavailable, nqd.CodeTimeout, nqd.CodeCanceled, nqd.CodeOutcomeUnknown, nqd.CodeInternal:
		return true
	}
	return false
}

// Get returns the schedule c. Errors: store.ErrNotFound.
func (s *Scheduler) Get(ctx context.Context, c store.Context) (*Schedule, error) {
	m, err := s.st.RunMeta(ctx, recordFlow(c), c.ID)
	if err != nil {
		return nil, err
	}
	sc := &Schedule{}
	if err := json.Unmarshal(m.State, sc); err != nil {
		return nil, fmt.Errorf("scheduler: record of %s: %w", c, err)
	}
	if sc.Deleted {
		return nil, errGone
	}
	sc.Stream = c
	return sc, nil
}

// List returns the schedules of stream type typ (TriggerStream or
// FlowStream), at most MaxList, newest first.
func (s *Scheduler) List(ctx context.Context, typ string) ([]*Schedule, error) {
	page, err := s.st.ListRuns(ctx, recordFlowPrefix+typ, store.RunRunning, 0, MaxList)
	if err != nil {
		return nil, err
	}
	out := make([]*Schedule, 0, len(page.Runs))
	for _, m := range page.Runs {
		sc := &Schedule{}
		if err := json.Unmarshal(m.State, sc); err != nil || sc.Deleted {
			continue
		}
		sc.Stream = store.Context{Type: typ, ID: m.RunID}
		out = append(out, sc)
	}
	return out, nil
}

// Delete removes the schedule c: it fires no more. Errors:
// store.ErrNotFound.
func (s *Scheduler) Delete(ctx context.Context, c store.Context) error {
	_, err := s.update(ctx, c, func(sc *Schedule, found bool, now time.Time) ([]event.Event, error) {
		if !found {
			return nil, errGone
		}
		sc.Deleted, sc.Pending, sc.Cancel, sc.Wake, sc.NextRun = true, nil, nil, 0, 0
		return []event.Event{s.event(sc, "schedule.deleted", nil)}, nil
	})
	return err
}

// SetPaused pauses or resumes the schedule c. A resumed schedule goes on
// with its first due time after now. Errors: store.ErrNotFound.
func (s *Scheduler) SetPaused(ctx context.Context, c store.Context, paused bool) (*Schedule, error) {
	return s.update(ctx, c, func(sc *Schedule, found bool, now time.Time) ([]event.Event, error) {
		if !found {
			return nil, errGone
		}
		cs, err := compile(sc)
		if err != nil {
			return nil, err
		}
		if sc.State.Paused == paused {
			s.plan(sc, cs, now)
			return nil, nil
		}
		kind := "schedule.resumed"
		if paused {
			kind, sc.State = "schedule.paused", schedule.Pause(sc.State)
		} else {
			sc.State = schedule.Resume(sc.State, now)
		}
		s.plan(sc, cs, now)
		return []event.Event{s.event(sc, kind, map[string]any{"at": isoMS(now.UnixMilli()), "nextRun": isoMS(sc.NextRun)})}, nil
	})
}

// FireNow fires the schedule c at once, outside its due times and its
// overlap policy, paused or not. Errors: store.ErrNotFound.
func (s *Scheduler) FireNow(ctx context.Context, c store.Context) (time.Time, error) {
	var at time.Time
	_, err := s.update(ctx, c, func(sc *Schedule, found bool, now time.Time) ([]event.Event, error) {
		if !found {
			return nil, errGone
		}
		cs, err := compile(sc)
		if err != nil {
			return nil, err
		}
		at = now
		return []event.Event{s.record(sc, cs, now, now, now, "now")}, nil
	})
	if err != nil {
		return at, err
	}
	return at, s.settle(ctx, c)
}

// Backfill fires the due times of c from through to (both included, at
// most MaxBackfill of them), as if they had come: a due time that started
// its flows before starts nothing more. Errors: store.ErrNotFound,
// store.ErrInvalid (an empty or too long range).
func (s *Scheduler) Backfill(ctx context.Context, c store.Context, from, to time.Time) ([]time.Time, error) {
	var dues []time.Time
	_, err := s.update(ctx, c, func(sc *Schedule, found bool, now time.Time) ([]event.Event, error) {
		if !found {
			return nil, errGone
		}
		cs, err := compile(sc)
		if err != nil {
			return nil, err
		}
		if to.After(now) {
			to = now
		}
		dues = dues[:0]
		for d := cs.Next(from.Add(-time.Millisecond), time.UnixMilli(sc.State.Anchor)); !d.IsZero() && !d.After(to); d = cs.Next(d, time.UnixMilli(sc.State.Anchor)) {
			if len(dues) == MaxBackfill {
				return nil, &nqd.Error{Code: nqd.CodeValidation, Message: "The backfill range holds too many due times.",
					Fields: map[string]string{"to": fmt.Sprintf("the range holds more than %d due times", MaxBackfill)}, Err: store.ErrInvalid}
			}
			dues = append(dues, d)
		}
		evs := make([]event.Event, 0, len(dues))
		for _, d := range dues {
			evs = append(evs, s.record(sc, cs, d, d, now, "backfill"))
		}
		return evs, nil
	})
	if err != nil {
		return nil, err
	}
	return dues, s.settle(ctx, c)
}

// Preview lists the next n due times of c as planned (jitter included).
// Errors: store.ErrNotFound.
func (s *Scheduler) Preview(ctx context.Context, c store.Context, n int) ([]time.Time, error) {
	sc, err := s.Get(ctx, c)
	if err != nil {
		return nil, err
	}
	cs, err := compile(sc)
	if err != nil {
		return nil, err
	}
	from := time.UnixMilli(max(sc.State.Cursor, s.opts.Now().UnixMilli()))
	out := cs.Preview(from, time.UnixMilli(sc.State.Anchor), n)
	for i, d := range out {
		out[i] = cs.Planned(d)
	}
	return out, nil
}

// Run keeps the schedules of schedule triggers in step with the registry
// every SyncEvery, and ticks the engine at each due time it knows of, so a
// fire is late by the time it takes, not by the engine's tick, until ctx
// ends.
func (s *Scheduler) Run(ctx context.Context) {
	nextSync := time.Now()
	t := time.NewTimer(0)
	defer t.Stop()
	// A store outage fails every sync and tick until it ends; it is logged
	// in a handful of lines, not one per attempt.
	syncing, ticking := outage.New(s.log, "schedule sync"), outage.New(s.log, "schedule tick")
	for {
		if now := time.Now(); !now.Before(nextSync) {
			if err := s.Sync(ctx); err != nil && ctx.Err() == nil {
				syncing.Failed(err)
			} else if err == nil {
				syncing.Succeeded()
			}
			s.refresh(ctx)
			nextSync = now.Add(s.opts.SyncEvery)
		}
		if s.due(time.Now()) {
			if err := s.eng.Tick(ctx); err != nil && ctx.Err() == nil {
				ticking.Failed(err)
			} else if err == nil {
				ticking.Succeeded()
			}
		}
		next := nextSync
		if w, ok := s.nextWake(); ok && w.Before(next) {
			next = w
		}
		t.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
	}
}

// maxWakes bounds the due times Run keeps; past it a due time waits for
// the engine's own tick.
const maxWakes = 100_000

// wake notes a due time (epoch ms) for Run.
func (s *Scheduler) wake(ms int64) {
	s.mu.Lock()
	if s.wakes.Len() < maxWakes {
		heap.Push(&s.wakes, ms)
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// due drops the due times at or before now and reports whether there
// were any.
func (s *Scheduler) due(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	found := false
	for s.wakes.Len() > 0 && s.wakes[0] <= now.UnixMilli() {
		heap.Pop(&s.wakes)
		found = true
	}
	return found
}

func (s *Scheduler) nextWake() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wakes.Len() == 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(s.wakes[0]), true
}

// refresh takes the due times of every schedule's record, those other
// instances wrote included.
func (s *Scheduler) refresh(ctx context.Context) {
	var wakes wakeHeap
	for _, typ := range []string{TriggerStream, FlowStream} {
		scs, err := s.List(ctx, typ)
		if err != nil {
			return
		}
		for _, sc := range scs {
			if sc.Wake > 0 && wakes.Len() < maxWakes {
				wakes = append(wakes, sc.Wake)
			}
		}
	}
	heap.Init(&wakes)
	s.mu.Lock()
	s.wakes = wakes
	s.mu.Unlock()
}

// wakeHeap is a min-heap of epoch ms.
type wakeHeap []int64

func (h wakeHeap) Len() int           { return len(h) }
func (h wakeHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h wakeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *wakeHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *wakeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Sync brings the schedules of schedule triggers in step with the
// registry: a new schedule trigger gets its schedule, a changed spec is
// put, an inactive trigger's schedule is paused, a deleted one's removed.
// Every instance may sync at once; each write is checked against the
// record it read.
func (s *Scheduler) Sync(ctx context.Context) error {
	if s.opts.Registry == nil {
		return nil
	}
	ts, err := s.opts.Registry.List(ctx)
	if err != nil {
		return err
	}
	have, err := s.List(ctx, TriggerStream)
	if err != nil {
		return err
	}
	known := map[string]*Schedule{}
	for _, sc := range have {
		known[sc.Name()] = sc
	}
	var errs []error
	for _, t := range ts {
		if t.Type != triggers.TypeSchedule {
			continue
		}
		var spec schedule.Spec
		if err := json.Unmarshal(t.Config, &spec); err != nil {
			errs = append(errs, fmt.Errorf("trigger %s: config: %w", t.Name, err))
			continue
		}
		c := store.Context{Type: TriggerStream, ID: t.Name}
		paused := t.Status != triggers.StatusActive
		sc, ok := known[t.Name]
		delete(known, t.Name)
		if !ok || !sameSpec(sc.Spec, spec) {
			if sc, err = s.Put(ctx, c, spec, nil, nil); err != nil {
				errs = append(errs, fmt.Errorf("trigger %s: %w", t.Name, err))
				continue
			}
		}
		if sc.State.Paused != paused {
			if _, err := s.SetPaused(ctx, c, paused); err != nil {
				errs = append(errs, fmt.Errorf("trigger %s: %w", t.Name, err))
			}
		}
	}
	for name := range known {
		if err := s.Delete(ctx, store.Context{Type: TriggerStream, ID: name}); err != nil && !errors.Is(err, store.ErrNotFound) {
			errs = append(errs, fmt.Errorf("trigger %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
