package engine

import (
	"encoding/json"
	"fmt"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/store"
)

// ErrStateInvalid: a state.* event breaks the flow's state schema (seed 000:
// state changes are validated at write time). Nothing of the report is stored.
var ErrStateInvalid = fmt.Errorf("engine: state does not match the flow's state schema: %w", store.ErrInvalid)

// StateError names the state key whose value broke the schema.
type StateError struct {
	Key    string
	Reason string
}

func (e *StateError) Error() string { return fmt.Sprintf("state %q: %s", e.Key, e.Reason) }

func (e *StateError) Unwrap() error { return ErrStateInvalid }

// checkState validates the state writes among evs against d's state
// schema, which describes the run's state as one object: each key set is
// checked against its property's schema (or refused when the schema allows
// no other properties), and a snapshot as the whole object.
func checkState(d *flows.Definition, evs []event.Event) error {
	if d == nil || len(d.StateSchema) == 0 {
		return nil
	}
	var sch openapi3.Schema
	if err := json.Unmarshal(d.StateSchema, &sch); err != nil {
		return &StateError{Key: "*", Reason: "the flow's state schema does not load: " + err.Error()}
	}
	for _, ev := range evs {
		switch ev.Kind {
		case "state.set":
			var op struct {
				Key   string          `json:"key"`
				Value json.RawMessage `json:"value"`
			}
			if json.Unmarshal(ev.Data, &op) != nil || op.Key == "" {
				return &StateError{Key: "?", Reason: "state.set needs {key, value}"}
			}
			if err := checkKey(&sch, op.Key, op.Value); err != nil {
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
				return &StateError{Key: "?", Reason: "state.batch needs {operations: [...]}"}
			}
			for _, op := range b.Operations {
				if op.Type != "set" {
					continue
				}
				if err := checkKey(&sch, op.Key, op.Value); err != nil {
					return err
				}
			}
		case "state.snapshot":
			var v any
			if err := json.Unmarshal(ev.Data, &v); err != nil {
				return &StateError{Key: "*", Reason: "a snapshot must be a JSON object"}
			}
			if err := sch.VisitJSON(v, openapi3.MultiErrors()); err != nil {
				return &StateError{Key: "*", Reason: err.Error()}
			}
		}
	}
	return nil
}

func checkKey(sch *openapi3.Schema, key string, raw json.RawMessage) error {
	var v any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &v); err != nil {
			return &StateError{Key: key, Reason: "the value is not JSON"}
		}
	}
	prop, ok := sch.Properties[key]
	switch {
	case ok && prop.Value != nil:
		if err := prop.Value.VisitJSON(v, openapi3.MultiErrors()); err != nil {
			return &StateError{Key: key, Reason: err.Error()}
		}
	case sch.AdditionalProperties.Schema != nil && sch.AdditionalProperties.Schema.Value != nil:
		if err := sch.AdditionalProperties.Schema.Value.VisitJSON(v, openapi3.MultiErrors()); err != nil {
			return &StateError{Key: key, Reason: err.Error()}
		}
	case sch.AdditionalProperties.Has != nil && !*sch.AdditionalProperties.Has:
		return &StateError{Key: key, Reason: "the state schema has no such key"}
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
