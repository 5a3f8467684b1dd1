package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"time"
)

// StepContext is what a handler gets besides its context: the job, and
// calls that report to nqd about it. Every report is retried until the
// job's lease ends; an error means it did not reach nqd (or nqd refused
// it, with a *StatusError naming the field), or that a value could not be
// encoded (an *EncodeError).
type StepContext struct {
	Job Job
	h   *held
	ctx context.Context
}

// Input decodes the job's input into v: the run input for the entry step,
// otherwise each subscribed event's payload keyed by event name.
func (sc *StepContext) Input(v any) error { return json.Unmarshal(sc.Job.Input, v) }

// Attempt is this try's number, 1 for the first.
func (sc *StepContext) Attempt() int { return sc.Job.Attempt }

// Emit emits event with payload; steps subscribed to it run once all their
// subscriptions were emitted. An event counts once per run. An emit made
// while step.started still waits for company (the step's first 100 ms,
// before it reported anything) waits with it: Emit then returns at once,
// and the emit goes with the step's first report or its outcome, which nqd
// refuses as a whole should it refuse the emit. Otherwise Emit returns once
// nqd stored the emit. A payload that cannot be encoded is an
// *EncodeError, and fails the step.
func (sc *StepContext) Emit(event string, payload any) error {
	ev, err := sc.h.newEvent("emit", fmt.Sprintf("emit payload %q", event), map[string]any{"event": event, "payload": payload})
	if err != nil {
		return err
	}
	return sc.h.emit(ev)
}

// Log appends a log event at level (debug, info, warn, error); args are
// key-value pairs or slog.Attrs, as for slog, kept as the log's metadata.
// It does not wait for nqd: the step's logs go in order, several in one
// call when they queue up, and all before its outcome. Metadata that cannot
// be encoded is an *EncodeError, and fails the step.
func (sc *StepContext) Log(level, msg string, args ...any) error {
	data := map[string]any{}
	r := slog.NewRecord(time.Time{}, 0, "", 0)
	r.Add(args...)
	r.Attrs(func(a slog.Attr) bool {
		data[a.Key] = a.Value.Resolve().Any()
		return true
	})
	data["level"], data["msg"] = level, msg
	ev, err := sc.h.newEvent("log", "log meta", data)
	if err != nil {
		return err
	}
	return sc.h.add(ev, false)
}

// Progress reports how far the step is, 0–100 by convention; like Log, it
// does not wait for nqd.
func (sc *StepContext) Progress(value float64) error {
	ev, err := sc.h.newEvent("step.progress", "progress", map[string]any{"progress": value})
	if err != nil {
		return err
	}
	return sc.h.add(ev, false)
}

// State gives the run's key-value state.
func (sc *StepContext) State() *State { return &State{sc: sc} }

// State reads and writes the run's state through state.* events; a write
// returns once nqd stored it, so a read sees every write before it. A value
// that cannot be encoded is an *EncodeError, and fails the step.
type State struct{ sc *StepContext }

// Set sets key to value.
func (s *State) Set(key string, value any) error {
	return s.write("state.set", fmt.Sprintf("state value %q", key), map[string]any{"key": key, "value": value})
}

// Delete removes key.
func (s *State) Delete(key string) error {
	return s.write("state.delete", "state key", map[string]any{"key": key})
}

// SetBatch sets every key of values in one event.
func (s *State) SetBatch(values map[string]any) error {
	ops := make([]map[string]any, 0, len(values))
	for k, v := range values {
		if _, err := s.sc.h.newEvent("state.batch", fmt.Sprintf("state value %q", k), v); err != nil {
			return err
		}
		ops = append(ops, map[string]any{"type": "set", "key": k, "value": v})
	}
	return s.write("state.batch", "state batch", map[string]any{"operations": ops})
}

func (s *State) write(kind, field string, data any) error {
	ev, err := s.sc.h.newEvent(kind, field, data)
	if err != nil {
		return err
	}
	return s.sc.h.add(ev, true)
}

// All returns the run's whole state as nqd's flow reducer folds it.
func (s *State) All() (map[string]json.RawMessage, error) {
	var ans struct {
		State struct {
			State map[string]json.RawMessage `json:"state"`
		} `json:"state"`
	}
	if err := s.sc.h.c.get(s.sc.ctx, "/api/_events/flow/"+url.PathEscape(s.sc.Job.RunID)+"/state", &ans); err != nil {
		return nil, err
	}
	if ans.State.State == nil {
		return map[string]json.RawMessage{}, nil
	}
	return ans.State.State, nil
}

// Get decodes key's value into v and reports whether it is set.
func (s *State) Get(key string, v any) (bool, error) {
	all, err := s.All()
	if err != nil {
		return false, err
	}
	raw, ok := all[key]
	if !ok {
		return false, nil
	}
	return true, json.Unmarshal(raw, v)
}

// Resume is how the await a step declared resolved: the engine queues an
// awaiting step once its await resolves and hands the resolution in the
// input's `_resume`.
type Resume struct {
	AwaitType string          `json:"awaitType"`
	TriggerID string          `json:"triggerId,omitempty"`
	Payload   json.RawMessage `json:"payload,omitempty"` // a trigger's POST body
	Event     json.RawMessage `json:"event,omitempty"`   // the event an event await matched
	ResumeAt  string          `json:"resumeAt,omitempty"`
	// TimedOut is set in the input of an await's onTimeout step.
	TimedOut bool   `json:"timedOut,omitempty"`
	Step     string `json:"step,omitempty"` // the step whose await timed out
}

// Resume returns the resolution of the step's await, and false when the
// step declared none.
func (sc *StepContext) Resume() (Resume, bool) {
	var in struct {
		Resume *Resume `json:"_resume"`
	}
	if json.Unmarshal(sc.Job.Input, &in) != nil || in.Resume == nil {
		return Resume{}, false
	}
	return *in.Resume, true
}
