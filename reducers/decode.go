package reducers

import (
	"encoding/json"
	"errors"
	"fmt"
	"unique"

	"github.com/nqd-dev/nqd/event"
)

// CheckpointVersion names the encoding MarshalCheckpoint writes and the fold
// rules the encoded state was built with. Raise it whenever a reducer change
// would fold the same events into a different state: checkpoints of another
// version are then refused and the state is folded again from the events.
const CheckpointVersion = 2

// ErrCheckpoint: the bytes are not a checkpoint this version can continue
// from (another version, another reducer, or corrupt).
var ErrCheckpoint = errors.New("unusable checkpoint")

// MarshalCheckpoint encodes s completely, with the bookkeeping its JSON form
// leaves out, so that a fold continued from UnmarshalCheckpoint's result gives
// the same states as one continued from s.
func MarshalCheckpoint(s State) ([]byte, error) {
	cp := checkpoint{V: CheckpointVersion}
	var err error
	switch st := s.(type) {
	case *FlowState:
		cp.Kind = "flow"
		cp.State, err = json.Marshal(flowCheckpointOf(st))
	case *GenericState:
		cp.Kind = "generic"
		cp.State, err = json.Marshal(genericCheckpointOf(st))
	case *TriggerState:
		cp.Kind = "trigger"
		cp.State, err = json.Marshal(triggerCheckpointOf(st))
	case *WorkersState:
		cp.Kind = "workers"
		cp.State, err = json.Marshal(workersCheckpointOf(st))
	default:
		return nil, fmt.Errorf("%w: %T", ErrStateType, s)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(cp)
}

// UnmarshalCheckpoint decodes a state MarshalCheckpoint wrote, which must be
// r's kind of state. Errors: ErrCheckpoint.
func UnmarshalCheckpoint(r Reducer, b []byte) (State, error) {
	var cp checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if cp.V != CheckpointVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrCheckpoint, cp.V, CheckpointVersion)
	}
	var (
		s   State
		err error
	)
	switch r.Init().(type) {
	case *FlowState:
		s, err = decodeCheckpoint(cp, "flow", (*flowCheckpoint).state)
	case *GenericState:
		s, err = decodeCheckpoint(cp, "generic", (*genericCheckpoint).state)
	case *TriggerState:
		s, err = decodeCheckpoint(cp, "trigger", (*triggerCheckpoint).state)
	case *WorkersState:
		s, err = decodeCheckpoint(cp, "workers", (*workersCheckpoint).state)
	default:
		return nil, fmt.Errorf("%w: reducer %T", ErrCheckpoint, r)
	}
	if err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	return s, nil
}

type checkpoint struct {
	V     int             `json:"v"`
	Kind  string          `json:"kind"`
	State json.RawMessage `json:"state"`
}

func decodeCheckpoint[C any, S State](cp checkpoint, kind string, build func(*C) (S, error)) (State, error) {
	if cp.Kind != kind {
		return nil, fmt.Errorf("%w: a %s state, want %s", ErrCheckpoint, cp.Kind, kind)
	}
	var c C
	if err := json.Unmarshal(cp.State, &c); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	s, err := build(&c)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	return s, nil
}

// positionCheckpoint is the position every state has.
type positionCheckpoint struct {
	Last  string `json:"last"`
	Count int    `json:"count"`
}

func positionCheckpointOf(p position) positionCheckpoint {
	return positionCheckpoint{Last: formatID(p.last), Count: p.count}
}

func (p positionCheckpoint) position() (position, error) {
	last, err := event.ParseID(p.Last)
	return position{last: last, count: p.Count}, err
}

// flowCheckpoint is every field of a FlowState. Times travel in their JSON
// form, which keeps the milliseconds that event times have.
type flowCheckpoint struct {
	Pos           positionCheckpoint         `json:"pos"`
	Status        string                     `json:"status"`
	Name          string                     `json:"name,omitempty"`
	RunID         string                     `json:"runId,omitempty"`
	Queue         string                     `json:"queue,omitempty"`
	Input         json.RawMessage            `json:"input,omitempty"`
	Result        json.RawMessage            `json:"result,omitempty"`
	Error         string                     `json:"error,omitempty"`
	Reason        string                     `json:"reason,omitempty"`
	StartedAt     Time                       `json:"startedAt"`
	CompletedAt   Time                       `json:"completedAt"`
	Duration      int64                      `json:"duration,omitempty"`
	Ignored       int                        `json:"ignored,omitempty"`
	Steps         map[string]*Step           `json:"steps,omitempty"`
	KV            map[string]json.RawMessage `json:"kv,omitempty"`
	Awaits        map[string]Await           `json:"awaits,omitempty"`
	Emitted       map[string]int             `json:"emitted,omitempty"`
	Logs          []LogEntry                 `json:"logs,omitempty"`
	Emits         []Emit                     `json:"emits,omitempty"`
	EventStatus   string                     `json:"eventStatus,omitempty"`
	EventEnd      Time                       `json:"eventEnd"`
	EventDuration int64                      `json:"eventDuration,omitempty"`
	Started       bool                       `json:"started,omitempty"`
	InferEnd      bool                       `json:"inferEnd,omitempty"`
	StepCounts    [len(stepStatuses)]int     `json:"stepCounts"`
	AwaitsWaiting int                        `json:"awaitsWaiting,omitempty"`
	LastDoneAt    Time                       `json:"lastDoneAt"`
}

func flowCheckpointOf(s *FlowState) flowCheckpoint {
	return flowCheckpoint{
		Pos: positionCheckpointOf(s.position), Status: s.Status, Name: s.Name, RunID: s.RunID,
		Queue: s.Queue, Input: s.Input, Result: s.Result, Error: s.Error, Reason: s.Reason,
		StartedAt: s.StartedAt, CompletedAt: s.CompletedAt, Duration: s.Duration, Ignored: s.Ignored,
		Steps: s.steps, KV: s.kv, Awaits: s.awaits, Emitted: s.emitted,
		Logs: s.Logs(), Emits: s.Emits(),
		EventStatus: s.eventStatus, EventEnd: s.eventEnd, EventDuration: s.eventDuration,
		Started: s.started, InferEnd: s.inferEnd, StepCounts: s.stepCounts,
		AwaitsWaiting: s.awaitsWaiting, LastDoneAt: s.lastDoneAt,
	}
}

func (c *flowCheckpoint) state() (*FlowState, error) {
	pos, err := c.Pos.position()
	if err != nil {
		return nil, err
	}
	for name, st := range c.Steps {
		if st == nil {
			return nil, fmt.Errorf("step %q is null", name)
		}
	}
	logs := make([]logRec, len(c.Logs))
	for i, l := range c.Logs {
		id, err := event.ParseID(l.ID)
		if err != nil {
			return nil, fmt.Errorf("log %q: %w", l.ID, err)
		}
		logs[i] = logRec{id: id, data: l.Data, attempt: l.Attempt, tag: unique.Make(logTag{step: l.Step, level: l.Level})}
	}
	emits := make([]emitRec, len(c.Emits))
	for i, e := range c.Emits {
		id, err := event.ParseID(e.ID)
		if err != nil {
			return nil, fmt.Errorf("emit %q: %w", e.ID, err)
		}
		emits[i] = emitRec{id: id, payload: e.Payload, tag: unique.Make(emitTag{step: e.Step, event: e.Event})}
	}
	// The lists get no spare capacity: the first push after a checkpoint
	// copies them, as it would for any state whose array is shared.
	return &FlowState{
		position: pos, Status: c.Status, Name: c.Name, RunID: c.RunID, Queue: c.Queue,
		Input: c.Input, Result: c.Result, Error: c.Error, Reason: c.Reason,
		StartedAt: c.StartedAt, CompletedAt: c.CompletedAt, Duration: c.Duration, Ignored: c.Ignored,
		steps: c.Steps, kv: c.KV, awaits: c.Awaits, emitted: c.Emitted,
		logs: tail[logRec]{items: logs}, emits: tail[emitRec]{items: emits},
		eventStatus: c.EventStatus, eventEnd: c.EventEnd, eventDuration: c.EventDuration,
		started: c.Started, inferEnd: c.InferEnd, stepCounts: c.StepCounts,
		awaitsWaiting: c.AwaitsWaiting, lastDoneAt: c.LastDoneAt,
	}, nil
}

type genericCheckpoint struct {
	Pos        positionCheckpoint `json:"pos"`
	First      string             `json:"first"`
	FirstAt    Time               `json:"firstAt"`
	LastAt     Time               `json:"lastAt"`
	OtherKinds int                `json:"otherKinds,omitempty"`
	Kinds      map[string]int     `json:"kinds,omitempty"`
}

func genericCheckpointOf(s *GenericState) genericCheckpoint {
	return genericCheckpoint{
		Pos: positionCheckpointOf(s.position), First: formatID(s.First), FirstAt: s.FirstAt,
		LastAt: s.LastAt, OtherKinds: s.OtherKinds, Kinds: s.kinds,
	}
}

func (c *genericCheckpoint) state() (*GenericState, error) {
	pos, err := c.Pos.position()
	if err != nil {
		return nil, err
	}
	first, err := event.ParseID(c.First)
	if err != nil {
		return nil, err
	}
	return &GenericState{position: pos, First: first, FirstAt: c.FirstAt, LastAt: c.LastAt,
		OtherKinds: c.OtherKinds, kinds: c.Kinds}, nil
}

type triggerCheckpoint struct {
	Pos           positionCheckpoint `json:"pos"`
	Status        string             `json:"status"`
	Trigger       string             `json:"trigger,omitempty"`
	Type          string             `json:"type,omitempty"`
	Config        json.RawMessage    `json:"config,omitempty"`
	CorrelationID string             `json:"correlationId,omitempty"`
	RegisteredAt  Time               `json:"registeredAt"`
	EndedAt       Time               `json:"endedAt"`
	Payload       json.RawMessage    `json:"payload,omitempty"`
	Source        string             `json:"source,omitempty"`
	Reason        string             `json:"reason,omitempty"`
	Duration      int64              `json:"duration,omitempty"`
	Fired         int                `json:"fired,omitempty"`
	Ignored       int                `json:"ignored,omitempty"`
	Registry      *Registered        `json:"registry,omitempty"`
}

func triggerCheckpointOf(s *TriggerState) triggerCheckpoint {
	return triggerCheckpoint{
		Pos: positionCheckpointOf(s.position), Status: s.Status, Trigger: s.Trigger, Type: s.Type,
		Config: s.Config, CorrelationID: s.CorrelationID, RegisteredAt: s.RegisteredAt,
		EndedAt: s.EndedAt, Payload: s.Payload, Source: s.Source, Reason: s.Reason,
		Duration: s.Duration, Fired: s.Fired, Ignored: s.Ignored, Registry: s.Registry,
	}
}

func (c *triggerCheckpoint) state() (*TriggerState, error) {
	pos, err := c.Pos.position()
	if err != nil {
		return nil, err
	}
	return &TriggerState{
		position: pos, Status: c.Status, Trigger: c.Trigger, Type: c.Type, Config: c.Config,
		CorrelationID: c.CorrelationID, RegisteredAt: c.RegisteredAt, EndedAt: c.EndedAt,
		Payload: c.Payload, Source: c.Source, Reason: c.Reason, Duration: c.Duration,
		Fired: c.Fired, Ignored: c.Ignored, Registry: c.Registry,
	}, nil
}
