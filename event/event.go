package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/nqd-dev/nqd/internal/jsonscan"
)

// Event is one record of a context's stream. The store assigns ID; the
// record's time is the id's milliseconds, so it is the store's clock and never
// goes backwards within a context.
type Event struct {
	ID            ID
	Kind          string
	Subject       string
	RunID         string // flow run id
	FlowName      string
	Step          string
	Attempt       int // 0 when absent; always equal to meta.attempt when set
	Trigger       string
	CorrelationID string
	Data          json.RawMessage // a JSON value or nil
	Meta          json.RawMessage // a JSON object or nil

	// Prev is not part of the record: a live feed that knows it (Redis's)
	// sets it to the id of the entry before this one in its stream when
	// this one was appended, so that a subscriber holding that entry knows
	// it missed none in between. Zero when the feed does not say.
	Prev ID
}

// TimeFormat is the layout of the record's `ts`: RFC 3339, UTC, milliseconds.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// Time is when the store accepted the event.
func (e Event) Time() time.Time { return e.ID.Time() }

// wire is the record as it leaves nqd: every aliased pair (the field aliases
// of docs/compatibility.md) is written in both spellings so both UI
// generations read it.
type wire struct {
	ID            string          `json:"id,omitempty"`
	TS            string          `json:"ts,omitempty"`
	Kind          string          `json:"kind"`
	Type          string          `json:"type"`
	Subject       string          `json:"subject"`
	Flow          string          `json:"flow,omitempty"`
	RunID         string          `json:"runId,omitempty"`
	FlowName      string          `json:"flowName,omitempty"`
	Step          string          `json:"step,omitempty"`
	StepName      string          `json:"stepName,omitempty"`
	Attempt       int             `json:"attempt,omitempty"`
	Trigger       string          `json:"trigger,omitempty"`
	CorrelationID string          `json:"correlationId,omitempty"`
	Data          json.RawMessage `json:"data,omitempty"`
	Meta          json.RawMessage `json:"meta,omitempty"`
}

// MarshalJSON writes the record as it leaves nqd (Event in openapi.yaml).
func (e Event) MarshalJSON() ([]byte, error) {
	return e.appendWire(make([]byte, 0, e.sizeHint()), true)
}

// sizeHint is about the length of the record, so it is written without
// growing its buffer.
func (e Event) sizeHint() int {
	return 160 + 2*(len(e.Kind)+len(e.RunID)+len(e.Step)) + len(e.Subject) + len(e.FlowName) +
		len(e.Trigger) + len(e.CorrelationID) + len(e.Data) + len(e.Meta)
}

// MarshalBody writes the record without `id` and `ts`: the form a store keeps,
// to which it adds the position it assigns.
func (e Event) MarshalBody() ([]byte, error) {
	return e.appendWire(make([]byte, 0, e.sizeHint()), false)
}

// UnmarshalJSON reads a record in either spelling. It is for records nqd wrote
// itself; client input goes through Input, which checks the aliases agree.
func (e *Event) UnmarshalJSON(b []byte) error {
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	var id ID
	if w.ID != "" {
		var err error
		if id, err = ParseID(w.ID); err != nil {
			return err
		}
	}
	*e = Event{
		ID: id, Kind: first(w.Kind, w.Type), Subject: w.Subject,
		RunID: first(w.Flow, w.RunID), FlowName: w.FlowName,
		Step: first(w.Step, w.StepName), Attempt: w.Attempt,
		Trigger: w.Trigger, CorrelationID: w.CorrelationID,
		Data: nullToNil(w.Data), Meta: nullToNil(w.Meta),
	}
	return nil
}

// DecodeStored reads a body written by MarshalBody and places it at id.
func DecodeStored(id ID, body []byte) (Event, error) {
	var d Decoder
	return d.Decode(id, body)
}

// A Decoder reads stored records as DecodeStored does, for reads of many
// records at once: a cold rebuild of a state reads every record of a
// context, and decoding them was most of its time. It scans a record's
// members without reflection, and shares with the record before the strings
// that repeat it (subject, run, flow name, step, kind), as the records of
// one context mostly do, so they are allocated once. The zero Decoder is
// ready to use; it is not safe for concurrent use.
type Decoder struct {
	prev Event
}

var wireNames = []string{
	"id", "ts", "kind", "type", "subject", "flow", "runId", "flowName", "step", "stepName",
	"attempt", "trigger", "correlationId", "data", "meta",
}

// Decode reads a body written by MarshalBody and places it at id.
func (d *Decoder) Decode(id ID, body []byte) (Event, error) {
	var w struct {
		kind, typ, flow, runID, step, stepName []byte
		e                                      Event
	}
	e := &w.e
	ok := jsonscan.Object(body, func(key, val []byte) bool {
		if !jsonscan.Plain(key) {
			return false
		}
		good := true
		switch string(key) {
		case "id":
			// The store gives the id; one written in the body must still parse.
			s, isStr := jsonscan.String(val)
			if !isStr {
				return jsonscan.IsNull(val)
			}
			_, err := ParseID(s)
			return s == "" || err == nil
		case "ts":
			return jsonscan.IsNull(val) || val[0] == '"'
		case "kind":
			w.kind, good = stringOrNull(w.kind, val)
		case "type":
			w.typ, good = stringOrNull(w.typ, val)
		case "subject":
			e.Subject, good = d.str(val, d.prev.Subject, e.Subject)
		case "flow":
			w.flow, good = stringOrNull(w.flow, val)
		case "runId":
			w.runID, good = stringOrNull(w.runID, val)
		case "flowName":
			e.FlowName, good = d.str(val, d.prev.FlowName, e.FlowName)
		case "step":
			w.step, good = stringOrNull(w.step, val)
		case "stepName":
			w.stepName, good = stringOrNull(w.stepName, val)
		case "attempt":
			if jsonscan.IsNull(val) {
				return true
			}
			e.Attempt, good = jsonscan.Int(val)
		case "trigger":
			e.Trigger, good = d.str(val, d.prev.Trigger, e.Trigger)
		case "correlationId":
			e.CorrelationID, good = d.str(val, d.prev.CorrelationID, e.CorrelationID)
		case "data":
			e.Data = rawCopy(val)
		case "meta":
			e.Meta = rawCopy(val)
		default:
			return !jsonscan.Folds(key, wireNames)
		}
		return good
	})
	if ok {
		var kind, flow, step string
		if kind, ok = d.str(w.kind, d.prev.Kind, ""); ok && kind == "" {
			kind, ok = d.str(w.typ, d.prev.Kind, "")
		}
		if f, fok := d.str(w.flow, d.prev.RunID, ""); fok && ok {
			if flow = f; flow == "" {
				flow, ok = d.str(w.runID, d.prev.RunID, "")
			}
		} else {
			ok = false
		}
		if st, sok := d.str(w.step, d.prev.Step, ""); sok && ok {
			if step = st; step == "" {
				step, ok = d.str(w.stepName, d.prev.Step, "")
			}
		} else {
			ok = false
		}
		e.Kind, e.RunID, e.Step = kind, flow, step
	}
	if !ok {
		// Anything the scan does not take as it comes (an escaped or
		// case-folded key, a value of another type, a broken record) is left
		// to encoding/json, which accepts or refuses it as it always has.
		if err := e.UnmarshalJSON(body); err != nil {
			return Event{}, err
		}
	}
	e.ID = id
	d.prev = *e
	return *e, nil
}

// str reads the JSON string val, or keeps cur when val is absent or null.
// It returns prev, the same field of the record before, when they are equal,
// rather than a new copy. ok is false for a value of any other type.
func (d *Decoder) str(val []byte, prev, cur string) (s string, ok bool) {
	if len(val) == 0 || jsonscan.IsNull(val) {
		return cur, true
	}
	if val[0] != '"' {
		return "", false
	}
	// Without a backslash the quoted bytes are the string itself.
	if inner := val[1 : len(val)-1]; len(inner) == len(prev) && string(inner) == prev && bytes.IndexByte(inner, '\\') < 0 {
		return prev, true
	}
	return jsonscan.String(val)
}

// stringOrNull is val when it is a string, cur when it is null (encoding/json
// leaves a string field as it was for a null), and not ok otherwise.
func stringOrNull(cur, val []byte) ([]byte, bool) {
	switch {
	case jsonscan.IsNull(val):
		return cur, true
	case val[0] == '"':
		return val, true
	}
	return nil, false
}

// rawCopy copies a raw value out of the buffer it was read from, which the
// store may reuse, as json.RawMessage does; null is nil.
func rawCopy(val []byte) json.RawMessage {
	if jsonscan.IsNull(val) {
		return nil
	}
	return bytes.Clone(val)
}

// ErrNotNodeEntry is returned by DecodeNodeFields for entries that lack the
// Node module's `type` field.
var ErrNotNodeEntry = errors.New("not a Nuxt Queue entry")

// DecodeNodeFields reads a stream entry written by the Nuxt Queue Node module,
// whose fields are type, runId, flowName, data (JSON), ts, stepName, stepId and
// attempt. subject is the context id the entry was read from.
func DecodeNodeFields(id ID, subject string, fields map[string]string) (Event, error) {
	kind := fields["type"]
	if kind == "" {
		return Event{}, ErrNotNodeEntry
	}
	e := Event{ID: id, Kind: kind, Subject: subject, FlowName: fields["flowName"], Step: fields["stepName"]}
	if run := fields["runId"]; run != "" && run != "unknown" {
		e.RunID = run
	}
	if e.FlowName == "unknown" {
		e.FlowName = ""
	}
	if d := fields["data"]; d != "" && json.Valid([]byte(d)) {
		e.Data = json.RawMessage(d)
	}
	meta := map[string]any{}
	if a, err := strconv.Atoi(fields["attempt"]); err == nil && a > 0 {
		e.Attempt = a
		meta["attempt"] = a
	}
	if s := fields["stepId"]; s != "" {
		meta["stepId"] = s
	}
	if len(meta) > 0 {
		e.Meta, _ = json.Marshal(meta)
	}
	return e, nil
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func nullToNil(m json.RawMessage) json.RawMessage {
	if len(m) == 0 || bytes.Equal(m, []byte("null")) {
		return nil
	}
	return m
}
