package engine

import (
	"encoding/json"
	"fmt"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/store"
)

// ErrStateInvalid: a state.* event breaks the flow's state schema (state
// changes are validated at write time). Nothing of the report is stored.
var ErrStateInvalid = fmt.Errorf("engine: state does not match the flow's state schema: %w", store.ErrInvalid)

// StateError names the places of the state that break the schema: under
// Fields, state.<key> (and the path within its value) and the rule broken.
type StateError struct {
	Fields map[string]string
}

func (e *StateError) Error() string { return fmt.Sprintf("state: %v", e.Fields) }

// Unwrap makes a StateError an ErrStateInvalid whose fields reach the
// worker.
func (e *StateError) Unwrap() error {
	return &nqd.Error{Code: nqd.CodeUnprocessable, Message: "The state does not match the flow's state schema; nothing was stored.",
		Fields: e.Fields, Err: ErrStateInvalid}
}

func stateError(at, reason string) *StateError {
	return &StateError{Fields: map[string]string{at: reason}}
}

// checkState validates the state writes among evs against d's state
// schema, which describes the run's state as one object: each key set is
// checked against its property's schema (or refused when the schema allows
// no other properties), and a snapshot as the whole object.
func checkState(d *flows.Definition, evs []event.Event) error {
	if d == nil || len(d.StateSchema) == 0 {
		return nil
	}
	sch, bad := flows.CompileSchema(d.StateSchema, "stateSchema")
	if bad != nil {
		return stateError("state", "the flow's state schema is not one nqd enforces")
	}
	for _, ev := range evs {
		switch ev.Kind {
		case "state.set":
			var op struct {
				Key   string          `json:"key"`
				Value json.RawMessage `json:"value"`
			}
			if json.Unmarshal(ev.Data, &op) != nil || op.Key == "" {
				return stateError("state", "state.set needs {key, value}")
			}
			if err := checkKey(sch, op.Key, op.Value); err != nil {
				return err
			}
		case "state.batch":
			var b struct {
				Operations []struct {
					Type  string          `json:"type"`
					Key   string          `json:"key"`
					Value json.RawMessage `json:"value"`
				} `json:"operations"`
			}
			if json.Unmarshal(ev.Data, &b) != nil {
				return stateError("state", "state.batch needs {operations: [...]}")
			}
			for _, op := range b.Operations {
				if op.Type != "set" {
					continue
				}
				if err := checkKey(sch, op.Key, op.Value); err != nil {
					return err
				}
			}
		case "state.snapshot":
			if bad := sch.Validate(ev.Data, "state"); bad != nil {
				return &StateError{Fields: bad}
			}
		}
	}
	return nil
}

func checkKey(sch *flows.Schema, key string, raw json.RawMessage) error {
	at := "state." + key
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	sub, ok, err := sch.Property(key)
	switch {
	case err != nil:
		return stateError(at, "the state schema for this key does not compile")
	case !ok:
		return stateError(at, "the state schema has no such key")
	case sub != nil:
		if bad := flows.ValidateWith(sub, raw, at); bad != nil {
			return &StateError{Fields: bad}
		}
	}
	return nil
}

// isStateWrite reports whether any of evs writes state.
func isStateWrite(evs []event.Event) bool {
	for _, ev := range evs {
		if ev.Kind == "state.set" || ev.Kind == "state.batch" || ev.Kind == "state.snapshot" {
			return true
		}
	}
	return false
}
