package reducers

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"unique"

	"github.com/nqd-dev/nqd/event"
)

// Flow run statuses (listed in docs/compatibility.md, "Statuses").
const (
	FlowRunning   = "running"
	FlowAwaiting  = "awaiting"
	FlowCompleted = "completed"
	FlowFailed    = "failed"
	FlowCancelled = "cancelled"
)

// Step statuses (listed in docs/compatibility.md, "Statuses"). Like the UIs,
// the reducer never assigns StepPending: a step exists once an event names
// it.
const (
	StepPending   = "pending"
	StepRunning   = "running"
	StepCompleted = "completed"
	StepFailed    = "failed"
	StepRetrying  = "retrying"
	StepWaiting   = "waiting"
	StepTimeout   = "timeout"
)

// Await statuses.
const (
	AwaitWaiting  = "waiting"
	AwaitResolved = "resolved"
	AwaitTimeout  = "timeout"
)

var stepStatuses = [...]string{StepPending, StepRunning, StepCompleted, StepFailed, StepRetrying, StepWaiting, StepTimeout}

// Indexes of stepStatuses, for the counts derive reads on every event.
const (
	iRunning   = 1
	iCompleted = 2
	iFailed    = 3
	iRetrying  = 4
	iWaiting   = 5
	iTimeout   = 6
)

func stepIndex(status string) int {
	for i, s := range stepStatuses {
		if s == status {
			return i
		}
	}
	return -1
}

// Flow reduces a flow run's stream: the kinds nqd's engine writes (flow.*,
// step.*, step.await.*, state.*, emit, log) and the v0.3 and v0.4/v0.5
// spellings of them listed in docs/compatibility.md.
//
// Status comes from flow.completed, flow.failed and flow.cancelled; the latest
// of them decides. Until one arrives the run is awaiting while some step or
// await waits and none runs, and running otherwise. nqd's engine starts runs
// with `flow.started` and always ends them with a terminal event; a run started
// with `flow.start` was written by the Node module, whose v0.3 versions never
// end one. For such a run, as the v0.3 UI does, the reducer infers completion
// when every step it has seen is completed, failed or timed out: failed if any
// failed. The inference is recomputed on every event, so the next step.started
// makes such a run running again, and a terminal event overrides it.
type Flow struct{ Limits Limits }

// FlowState is the state of a flow run. Read it through its exported fields,
// its accessors and its JSON form; it is immutable.
type FlowState struct {
	position
	Status      string
	Name        string // the flow definition's name
	RunID       string
	Queue       string
	Input       json.RawMessage
	Result      json.RawMessage
	Error       string // from flow.failed
	Reason      string // from flow.cancelled
	StartedAt   Time   // flow.started's time, else the first event's
	CompletedAt Time   // set while the status is terminal
	Duration    int64  // ms, set while the status is terminal
	Ignored     int    // events of unknown kinds, or without what their kind needs

	// Maps are shared between states and never written once a state is
	// returned; a fold copies each at most once (see flowFold).
	steps   map[string]*Step // values are never written once stored, so clones share them
	kv      map[string]json.RawMessage
	awaits  map[string]Await
	emitted map[string]int
	logs    tail[logRec]
	emits   tail[emitRec]

	// What the events said, before derive: the exported status, end and
	// duration are computed from these and the step counts.
	eventStatus   string
	eventEnd      Time
	eventDuration int64
	started       bool
	inferEnd      bool
	stepCounts    [len(stepStatuses)]int
	awaitsWaiting int
	lastDoneAt    Time
}

// Step is one step of a run, as its latest attempt left it.
type Step struct {
	Status      string          `json:"status"`
	Attempt     int             `json:"attempt"`
	MaxAttempts int             `json:"maxAttempts,omitempty"`
	StartedAt   Time            `json:"startedAt,omitzero"`
	CompletedAt Time            `json:"completedAt,omitzero"`
	Duration    int64           `json:"duration,omitempty"` // ms
	Error       string          `json:"error,omitempty"`
	Result      json.RawMessage `json:"result,omitempty"`
	AwaitType   string          `json:"awaitType,omitempty"`
	AwaitData   json.RawMessage `json:"awaitData,omitempty"`
	NextRetryAt string          `json:"nextRetryAt,omitempty"`
}

// Await is one pause of a step: keyed by step for step.await.* events, and by
// `<step>:await-<position>` for the v0.4/v0.5 engine's await.* events.
type Await struct {
	Step         string          `json:"step"`
	Type         string          `json:"type,omitempty"` // time, event, trigger, webhook, schedule
	Status       string          `json:"status"`
	RegisteredAt Time            `json:"registeredAt,omitzero"`
	ResolvedAt   Time            `json:"resolvedAt,omitzero"`
	Data         json.RawMessage `json:"data,omitempty"`
	Result       json.RawMessage `json:"result,omitempty"`
}

// LogEntry is one log event of a run.
type LogEntry struct {
	ID      string          `json:"id"`
	TS      Time            `json:"ts"`
	Step    string          `json:"step,omitempty"`
	Attempt int             `json:"attempt,omitempty"`
	Level   string          `json:"level"`
	Msg     string          `json:"msg"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// Emit is one event a step emitted, with the payload the engine passes to
// the steps subscribed to it.
type Emit struct {
	ID      string          `json:"id"`
	TS      Time            `json:"ts"`
	Step    string          `json:"step,omitempty"`
	Event   string          `json:"event"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// Step returns the named step.
func (s *FlowState) Step(name string) (Step, bool) {
	if st, ok := s.steps[name]; ok {
		return *st, true
	}
	return Step{}, false
}

// Steps returns a copy of the steps by name.
func (s *FlowState) Steps() map[string]Step {
	out := make(map[string]Step, len(s.steps))
	for name, st := range s.steps {
		out[name] = *st
	}
	return out
}

// Value returns a key of the run's KV state.
func (s *FlowState) Value(key string) (json.RawMessage, bool) {
	v, ok := s.kv[key]
	return v, ok
}

// KV returns a copy of the run's KV state, built from its state.* events.
func (s *FlowState) KV() map[string]json.RawMessage { return cloneOrEmpty(s.kv) }

// Awaits returns a copy of the awaits by key.
func (s *FlowState) Awaits() map[string]Await { return cloneOrEmpty(s.awaits) }

// Emitted returns how many times the run emitted the named event; only the
// first Limits.Names distinct names are counted.
func (s *FlowState) Emitted(name string) int { return s.emitted[name] }

// Logs returns the newest log entries, oldest first, in a new slice.
func (s *FlowState) Logs() []LogEntry {
	out := make([]LogEntry, len(s.logs.items))
	for i, l := range s.logs.items {
		out[i] = l.entry()
	}
	return out
}

// Emits returns the newest emitted events, oldest first, in a new slice.
func (s *FlowState) Emits() []Emit {
	out := make([]Emit, len(s.emits.items))
	for i, e := range s.emits.items {
		out[i] = e.entry()
	}
	return out
}

// logRec is a log entry as a state keeps it. A cache holds many states of
// long runs and logs are most of what they hold, so an entry keeps only
// what its LogEntry cannot be derived from: the event id, which gives the
// entry's id and time; the payload, which gives the message; and the step
// and level, interned, since a run repeats a few of them many times.
type logRec struct {
	id      event.ID
	data    json.RawMessage
	attempt int
	tag     unique.Handle[logTag]
}

type logTag struct{ step, level string }

func (l logRec) entry() LogEntry {
	tag := l.tag.Value()
	return LogEntry{
		ID: formatID(l.id), TS: Time{l.id.Time()}, Step: tag.step, Attempt: l.attempt,
		Level: tag.level, Msg: logMessage(l.data), Data: l.data,
	}
}

// emitRec is an Emit as a state keeps it; see logRec.
type emitRec struct {
	id      event.ID
	payload json.RawMessage
	tag     unique.Handle[emitTag]
}

type emitTag struct{ step, event string }

// recent holds the handles a fold made last, newest at next-1.
type recent[T comparable] struct {
	handles [8]unique.Handle[T]
	next    int
}

// intern returns the handle of v, one of r's when it holds v already.
func (r *recent[T]) intern(v T) unique.Handle[T] {
	for _, h := range r.handles {
		if h != (unique.Handle[T]{}) && h.Value() == v {
			return h
		}
	}
	h := unique.Make(v)
	r.handles[r.next] = h
	r.next = (r.next + 1) % len(r.handles)
	return h
}

func (e emitRec) entry() Emit {
	tag := e.tag.Value()
	return Emit{ID: formatID(e.id), TS: Time{e.id.Time()}, Step: tag.step, Event: tag.event, Payload: e.payload}
}

func cloneOrEmpty[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return maps.Clone(m)
}

type flowWire struct {
	Status      string                     `json:"status"`
	Name        string                     `json:"name,omitempty"`
	RunID       string                     `json:"runId,omitempty"`
	Queue       string                     `json:"queue,omitempty"`
	Input       json.RawMessage            `json:"input,omitempty"`
	Result      json.RawMessage            `json:"result,omitempty"`
	Error       string                     `json:"error,omitempty"`
	Reason      string                     `json:"reason,omitempty"`
	StartedAt   Time                       `json:"startedAt,omitzero"`
	CompletedAt Time                       `json:"completedAt,omitzero"`
	Duration    int64                      `json:"duration,omitempty"`
	Steps       map[string]*Step           `json:"steps"`
	Awaits      map[string]Await           `json:"awaits"`
	State       map[string]json.RawMessage `json:"state"`
	Logs        []LogEntry                 `json:"logs"`
	Emits       []Emit                     `json:"emits"`
	Emitted     map[string]int             `json:"emitted"`
	LastEventID string                     `json:"lastEventId,omitempty"`
	EventCount  int                        `json:"eventCount"`
	Ignored     int                        `json:"ignored,omitempty"`
}

// MarshalJSON writes the state the API returns for a flow context.
func (s *FlowState) MarshalJSON() ([]byte, error) {
	w := flowWire{
		Status: s.Status, Name: s.Name, RunID: s.RunID, Queue: s.Queue,
		Input: s.Input, Result: s.Result, Error: s.Error, Reason: s.Reason,
		StartedAt: s.StartedAt, CompletedAt: s.CompletedAt, Duration: s.Duration,
		Steps: nonNil(s.steps), Awaits: nonNil(s.awaits), State: nonNil(s.kv),
		Logs: s.Logs(), Emits: s.Emits(), Emitted: nonNil(s.emitted),
		EventCount: s.count, Ignored: s.Ignored,
	}
	if s.count > 0 {
		w.LastEventID = formatID(s.last)
	}
	return json.Marshal(w)
}

func nonNil[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}

// Validate checks the invariants every fold must keep.
func (s *FlowState) Validate() error {
	if err := s.position.validate(s.Ignored); err != nil {
		return err
	}
	terminal := false
	switch s.Status {
	case FlowCompleted, FlowFailed, FlowCancelled:
		terminal = true
	case FlowRunning, FlowAwaiting:
	default:
		return fmt.Errorf("flow status %q", s.Status)
	}
	if terminal == s.CompletedAt.IsZero() {
		return fmt.Errorf("status %s with completedAt %v", s.Status, s.CompletedAt)
	}
	if s.Duration < 0 {
		return fmt.Errorf("duration %d", s.Duration)
	}
	var counts [len(stepStatuses)]int
	for name, st := range s.steps {
		i := stepIndex(st.Status)
		if i < 0 {
			return fmt.Errorf("step %q: status %q", name, st.Status)
		}
		counts[i]++
		if st.Attempt < 1 {
			return fmt.Errorf("step %q: attempt %d", name, st.Attempt)
		}
		if st.Duration < 0 {
			return fmt.Errorf("step %q: duration %d", name, st.Duration)
		}
	}
	if counts != s.stepCounts {
		return fmt.Errorf("step counts %v, steps say %v", s.stepCounts, counts)
	}
	waiting := 0
	for _, a := range s.awaits {
		if a.Status == AwaitWaiting {
			waiting++
		}
	}
	if waiting != s.awaitsWaiting {
		return fmt.Errorf("%d awaits waiting, counted %d", waiting, s.awaitsWaiting)
	}
	if s.logs.len()+s.emits.len() > s.count {
		return fmt.Errorf("%d logs and %d emits from %d events", s.logs.len(), s.emits.len(), s.count)
	}
	return nil
}

// Init returns the state of a run with no events.
func (Flow) Init() State { return newFlowState() }

func newFlowState() *FlowState { return &FlowState{Status: FlowRunning} }

// Apply folds one event into s. See Reducer.
func (r Flow) Apply(s State, ev event.Event) (State, error) {
	return r.Fold(s, []event.Event{ev})
}

// Fold folds evs into s. See Reducer.
func (r Flow) Fold(s State, evs []event.Event) (State, error) {
	return foldCopy(s, evs, newFlowState, func(next *FlowState) func(event.Event) {
		f := &flowFold{s: next, lim: r.Limits}
		return f.apply
	})
}

// flowFold applies events to a private copy of a state. The copy starts out
// sharing its maps with the state it was made from; the first write to a map
// clones it, and later writes in the same fold go to the clone.
type flowFold struct {
	s                                      *FlowState
	lim                                    Limits
	ownSteps, ownKV, ownAwaits, ownEmitted bool

	// The tags interned lately: nearby entries mostly share them, and a few
	// comparisons are cheaper than a lookup in unique's map.
	logTags  recent[logTag]
	emitTags recent[emitTag]
}

type flowFunc func(f *flowFold, ev event.Event, t Time) bool

// flowKinds dispatches on the event kind, like raft's stepFunc. A handler
// returns false when the event lacks what its kind needs.
var flowKinds = map[string]flowFunc{
	"flow.started":        flowStarted,
	"flow.start":          flowStarted,
	"flow.completed":      flowEnded(FlowCompleted),
	"flow.complete":       flowEnded(FlowCompleted),
	"flow.failed":         flowEnded(FlowFailed),
	"flow.cancelled":      flowEnded(FlowCancelled),
	"flow.canceled":       flowEnded(FlowCancelled),
	"flow.cancel":         flowEnded(FlowCancelled),
	"step.started":        stepStarted,
	"flow.step.started":   stepStarted,
	"step.completed":      stepCompleted,
	"flow.step.completed": stepCompleted,
	"step.failed":         stepFailed,
	"step.retry":          stepRetry,
	"step.await.time":     stepAwait,
	"step.await.event":    stepAwait,
	"step.await.trigger":  stepAwait,
	"step.resumed":        stepResumed,
	"step.await.timeout":  stepAwaitTimeout,
	"await.registered":    awaitRegistered,
	"await.resolved":      awaitEnded(AwaitResolved),
	"await.timeout":       awaitEnded(AwaitTimeout),
	"log":                 flowLog,
	"runner.log":          flowLog,
	"emit":                flowEmit,
	"state.set":           stateSet,
	"state.delete":        stateDelete,
	"state.batch":         stateBatch,
	"state.snapshot":      stateSnapshot,
}

func (f *flowFold) apply(ev event.Event) {
	s := f.s
	s.advance(ev)
	t := Time{ev.Time()}
	if s.count == 1 && !s.started {
		s.StartedAt = t
	}
	if s.RunID == "" {
		s.RunID = ev.RunID
	}
	if s.Name == "" {
		s.Name = ev.FlowName
	}
	handle := flowKinds[ev.Kind]
	if handle == nil && strings.HasPrefix(ev.Kind, "log.") {
		handle = flowLog
	}
	if handle == nil || !handle(f, ev, t) {
		s.Ignored++
	}
	s.derive()
}

// derive sets the exported status, end and duration from what the events
// said and the step counts; see Flow.
func (s *FlowState) derive() {
	if s.eventStatus != "" {
		s.Status, s.CompletedAt, s.Duration = s.eventStatus, s.eventEnd, s.eventDuration
		return
	}
	c := &s.stepCounts
	moving := c[iRunning] + c[iRetrying]
	waiting := c[iWaiting]
	done := c[iCompleted] + c[iFailed] + c[iTimeout]
	s.CompletedAt, s.Duration = Time{}, 0
	switch {
	case s.inferEnd && len(s.steps) > 0 && done == len(s.steps):
		s.Status = FlowCompleted
		if c[iFailed] > 0 {
			s.Status = FlowFailed
		}
		s.CompletedAt = s.lastDoneAt
		s.Duration = millisSince(s.StartedAt, s.lastDoneAt)
	case moving == 0 && (waiting > 0 || s.awaitsWaiting > 0):
		s.Status = FlowAwaiting
	default:
		s.Status = FlowRunning
	}
}

func flowStarted(f *flowFold, ev event.Event, t Time) bool {
	var d startedData
	decode(ev.Data, &d, d.set)
	s := f.s
	s.Name = firstText(s.Name, d.Name, d.FlowName)
	s.Queue = firstText(s.Queue, d.Queue)
	if s.Input == nil {
		s.Input = rawValue(d.Input)
	}
	if !s.started {
		s.started, s.StartedAt = true, t
	}
	if ev.Kind == "flow.start" {
		s.inferEnd = true
	}
	return true
}

func flowEnded(status string) flowFunc {
	return func(f *flowFold, ev event.Event, t Time) bool {
		var d endedData
		decode(ev.Data, &d, d.set)
		s := f.s
		s.eventStatus, s.eventEnd = status, t
		s.eventDuration = firstInt(int64(d.Duration), millisSince(s.StartedAt, t))
		switch status {
		case FlowCompleted:
			if r := rawValue(d.Result); r != nil {
				s.Result = r
			}
		case FlowFailed:
			s.Error = string(d.Error)
		case FlowCancelled:
			s.Reason = string(d.Reason)
		}
		return true
	}
}

// stepPayload is what step events carry in data and meta; the v0.3 module's
// engine puts in data what nqd's engine puts in meta, so both are read.
type stepPayload struct {
	Error       flexText        `json:"error"`
	Message     flexText        `json:"message"`
	WillRetry   flexBool        `json:"willRetry"`
	Retry       flexBool        `json:"retry"`
	NextAttempt flexInt         `json:"nextAttempt"`
	Attempt     flexInt         `json:"attempt"`
	MaxAttempts flexInt         `json:"maxAttempts"`
	NextRetryAt flexText        `json:"nextRetryAt"`
	ScheduledAt flexText        `json:"scheduledAt"`
	Result      json.RawMessage `json:"result"`
	Duration    flexInt         `json:"duration"`
	AwaitType   string          `json:"awaitType"`
	Reason      flexText        `json:"reason"`
	StepName    string          `json:"stepName"`
	StepKey     string          `json:"stepKey"`
	Step        string          `json:"step"`
}

type stepEvent struct {
	name        string
	data, meta  stepPayload
	st          Step
	existed     bool
	prevAttempt int // the step's attempt before this event, 0 for a new step
}

// readStep finds the step an event names (the record's step, else data's
// stepName, stepKey or step, else meta's stepKey or step, as the v0.3 UI
// looks for it) and its current state. ok is false when no step is named.
func (f *flowFold) readStep(ev event.Event) (e stepEvent, ok bool) {
	decode(ev.Data, &e.data, e.data.set)
	decode(ev.Meta, &e.meta, e.meta.set)
	e.name = firstText(ev.Step, e.data.StepName, e.data.StepKey, e.data.Step, e.meta.StepKey, e.meta.Step)
	if e.name == "" {
		return e, false
	}
	if prev, ok := f.s.steps[e.name]; ok {
		e.st, e.existed, e.prevAttempt = *prev, true, prev.Attempt
	} else {
		e.st.Attempt = 1
	}
	if a := firstInt(int64(ev.Attempt), int64(e.meta.Attempt), int64(e.data.Attempt)); a > 0 {
		e.st.Attempt = int(a)
	}
	if m := firstInt(int64(e.meta.MaxAttempts), int64(e.data.MaxAttempts)); m > 0 {
		e.st.MaxAttempts = int(m)
	}
	return e, true
}

// writeStep stores the step and keeps the status counts that derive reads.
func (f *flowFold) writeStep(e stepEvent) {
	s := f.s
	if !f.ownSteps {
		s.steps, f.ownSteps = cloneOrEmpty(s.steps), true
	}
	if e.existed {
		s.stepCounts[stepIndex(s.steps[e.name].Status)]--
	}
	s.stepCounts[stepIndex(e.st.Status)]++
	st := e.st
	s.steps[e.name] = &st
}

func (e *stepEvent) finish(f *flowFold, status string, t Time) {
	e.st.Status, e.st.CompletedAt = status, t
	e.st.Duration = firstInt(int64(e.meta.Duration), int64(e.data.Duration), millisSince(e.st.StartedAt, t))
	e.st.AwaitType, e.st.AwaitData, e.st.NextRetryAt = "", nil, ""
	f.s.lastDoneAt = t
}

func stepStarted(f *flowFold, ev event.Event, t Time) bool {
	e, ok := f.readStep(ev)
	if !ok {
		return false
	}
	e.st.Status, e.st.StartedAt = StepRunning, t
	e.st.CompletedAt, e.st.Duration, e.st.Result = Time{}, 0, nil
	e.st.AwaitType, e.st.AwaitData, e.st.NextRetryAt = "", nil, ""
	f.writeStep(e)
	return true
}

func stepCompleted(f *flowFold, ev event.Event, t Time) bool {
	e, ok := f.readStep(ev)
	if !ok {
		return false
	}
	e.finish(f, StepCompleted, t)
	e.st.Result, e.st.Error = rawValue(e.data.Result), ""
	f.writeStep(e)
	return true
}

// stepFailed handles both retry forms (docs/compatibility.md): nqd's
// non-final failure (willRetry) and the v0.3 module's final-only failure.
func stepFailed(f *flowFold, ev event.Event, t Time) bool {
	e, ok := f.readStep(ev)
	if !ok {
		return false
	}
	e.st.Error = string(e.data.Error)
	if e.st.Error == "" {
		e.st.Error = string(e.data.Message)
	}
	if e.data.WillRetry || e.data.Retry {
		e.st.Status = StepRetrying
		e.st.NextRetryAt = string(e.data.NextRetryAt)
	} else {
		e.finish(f, StepFailed, t)
	}
	f.writeStep(e)
	return true
}

func stepRetry(f *flowFold, ev event.Event, t Time) bool {
	e, ok := f.readStep(ev)
	if !ok {
		return false
	}
	// nqd's engine puts the coming attempt in meta.attempt, the v0.3 module in
	// data.nextAttempt beside the failed one in data.attempt.
	e.st.Attempt = int(firstInt(int64(e.data.NextAttempt), int64(ev.Attempt), int64(e.meta.Attempt), int64(e.prevAttempt)+1))
	e.st.Status = StepRetrying
	if msg := string(e.data.Error); msg != "" {
		e.st.Error = msg
	}
	e.st.NextRetryAt = firstText(string(e.meta.ScheduledAt), string(e.data.NextRetryAt), e.st.NextRetryAt)
	f.writeStep(e)
	return true
}

func stepAwait(f *flowFold, ev event.Event, t Time) bool {
	e, ok := f.readStep(ev)
	if !ok {
		return false
	}
	kind := strings.TrimPrefix(ev.Kind, "step.await.")
	e.st.Status, e.st.AwaitType, e.st.AwaitData = StepWaiting, kind, rawValue(ev.Data)
	f.writeStep(e)
	f.writeAwait(e.name, Await{Step: e.name, Type: kind, Status: AwaitWaiting, RegisteredAt: t, Data: e.st.AwaitData})
	return true
}

func stepResumed(f *flowFold, ev event.Event, t Time) bool {
	e, ok := f.readStep(ev)
	if !ok {
		return false
	}
	e.st.Status, e.st.AwaitType, e.st.AwaitData = StepRunning, "", nil
	f.writeStep(e)
	f.endAwait(e.name, e.name, AwaitResolved, firstText(e.meta.AwaitType, e.data.AwaitType), t, rawValue(ev.Data))
	return true
}

func stepAwaitTimeout(f *flowFold, ev event.Event, t Time) bool {
	e, ok := f.readStep(ev)
	if !ok {
		return false
	}
	e.finish(f, StepTimeout, t)
	e.st.Error = fmt.Sprintf("Await timeout after %dms", int64(e.data.Duration))
	e.st.Duration = millisSince(e.st.StartedAt, t)
	f.writeStep(e)
	f.endAwait(e.name, e.name, AwaitTimeout, e.data.AwaitType, t, nil)
	return true
}

// awaitKey is the key the v0.4/v0.5 UI gives an await, <step>:await-<position>
// (position "after" when the event names none).
func awaitKey(ev event.Event) (step, key string, ok bool) {
	var d awaitData
	decode(ev.Data, &d, d.set)
	step = ev.Step
	if step == "" {
		return "", "", false
	}
	return step, step + ":await-" + firstText(d.Position, "after"), true
}

func awaitRegistered(f *flowFold, ev event.Event, t Time) bool {
	step, key, ok := awaitKey(ev)
	if !ok {
		return false
	}
	var d awaitData
	decode(ev.Data, &d, d.set)
	f.writeAwait(key, Await{Step: step, Type: d.AwaitType, Status: AwaitWaiting, RegisteredAt: t, Data: rawValue(ev.Data)})
	return true
}

func awaitEnded(status string) flowFunc {
	return func(f *flowFold, ev event.Event, t Time) bool {
		step, key, ok := awaitKey(ev)
		if !ok {
			return false
		}
		var d awaitData
		decode(ev.Data, &d, d.set)
		f.endAwait(key, step, status, "", t, rawValue(d.TriggerData))
		return true
	}
}

func (f *flowFold) writeAwait(key string, a Await) {
	s := f.s
	if !f.ownAwaits {
		s.awaits, f.ownAwaits = cloneOrEmpty(s.awaits), true
	}
	if s.awaits[key].Status == AwaitWaiting {
		s.awaitsWaiting--
	}
	if a.Status == AwaitWaiting {
		s.awaitsWaiting++
	}
	s.awaits[key] = a
}

// endAwait closes an await, creating it when its start was not seen.
func (f *flowFold) endAwait(key, step, status, kind string, t Time, result json.RawMessage) {
	a, ok := f.s.awaits[key]
	if !ok {
		a = Await{Step: step}
	}
	a.Status, a.ResolvedAt, a.Result = status, t, result
	a.Type = firstText(a.Type, kind)
	f.writeAwait(key, a)
}

func flowLog(f *flowFold, ev event.Event, t Time) bool {
	var d levelData
	decode(ev.Data, &d, d.set)
	level := d.Level
	if level == "" {
		level = "info"
		if l, ok := strings.CutPrefix(ev.Kind, "log."); ok {
			level = l
		}
	}
	tag := f.logTags.intern(logTag{step: ev.Step, level: level})
	f.s.logs = f.s.logs.push(logRec{id: ev.ID, data: ev.Data, attempt: ev.Attempt, tag: tag}, f.lim.logs())
	return true
}

// logMessage is the text of a log entry: its payload's msg, else its
// message. Logs are most of a stream: the usual string fields are read
// first, and the slower flexible reading only when both are missing.
func logMessage(data json.RawMessage) string {
	var d logData
	decode(data, &d, d.set)
	if d.Msg == "" && d.Message == "" {
		var flex logText
		decode(data, &flex, flex.set)
		d.Msg, d.Message = string(flex.Msg), string(flex.Message)
	}
	return firstText(d.Msg, d.Message)
}

// flowEmit reads nqd's `{event, payload}` and the v0.3 module's `{name, ...payload}`.
func flowEmit(f *flowFold, ev event.Event, t Time) bool {
	var d emitData
	decode(ev.Data, &d, d.set)
	name, payload := d.Event, rawValue(d.Payload)
	if name == "" && d.Name != "" {
		var rest map[string]json.RawMessage
		_ = json.Unmarshal(ev.Data, &rest)
		delete(rest, "name")
		name, payload = d.Name, nil
		if len(rest) > 0 {
			payload, _ = json.Marshal(rest)
		}
	}
	if name == "" {
		return false
	}
	s := f.s
	tag := f.emitTags.intern(emitTag{step: ev.Step, event: name})
	s.emits = s.emits.push(emitRec{id: ev.ID, payload: payload, tag: tag}, f.lim.emits())
	if _, seen := s.emitted[name]; seen || len(s.emitted) < f.lim.names() {
		if !f.ownEmitted {
			s.emitted, f.ownEmitted = cloneOrEmpty(s.emitted), true
		}
		s.emitted[name]++
	}
	return true
}

func (f *flowFold) kv() map[string]json.RawMessage {
	if !f.ownKV {
		f.s.kv, f.ownKV = cloneOrEmpty(f.s.kv), true
	}
	return f.s.kv
}

type stateOp struct {
	Type  string          `json:"type"`
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

func (f *flowFold) stateOp(op stateOp) bool {
	if op.Key == "" {
		return false
	}
	switch op.Type {
	case "set":
		v := rawValue(op.Value)
		if v == nil {
			v = json.RawMessage("null")
		}
		f.kv()[op.Key] = v
	case "delete":
		if _, ok := f.s.kv[op.Key]; ok {
			delete(f.kv(), op.Key)
		}
	default:
		return false
	}
	return true
}

func stateSet(f *flowFold, ev event.Event, _ Time) bool {
	var op stateOp
	decode(ev.Data, &op, op.set)
	op.Type = "set"
	return f.stateOp(op)
}

func stateDelete(f *flowFold, ev event.Event, _ Time) bool {
	var op stateOp
	decode(ev.Data, &op, op.set)
	op.Type = "delete"
	return f.stateOp(op)
}

// stateBatch applies the operations it can read and skips the others.
func stateBatch(f *flowFold, ev event.Event, _ Time) bool {
	var d batchData
	decode(ev.Data, &d, d.set)
	applied := false
	for _, op := range d.Operations {
		applied = f.stateOp(op) || applied
	}
	return applied
}

// stateSnapshot replaces the whole KV state.
func stateSnapshot(f *flowFold, ev event.Event, _ Time) bool {
	var all map[string]json.RawMessage
	if len(ev.Data) == 0 || ev.Data[0] != '{' || json.Unmarshal(ev.Data, &all) != nil {
		return false
	}
	kv := make(map[string]json.RawMessage, len(all))
	for k, v := range all {
		if v = rawValue(v); v == nil {
			v = json.RawMessage("null")
		}
		kv[k] = v
	}
	f.s.kv, f.ownKV = kv, true
	return true
}
