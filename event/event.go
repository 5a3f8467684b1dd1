package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"time"
)

// Event is one record of a context's stream. The store assigns ID; the
// record's time is the id's milliseconds, so it is the store's clock and never
// goes backwards within a context.
type Event struct {
	ID            ID
	Kind          string
	Subject       string
	Flow          string // flow run id
	FlowName      string
	Step          string
	Attempt       int // 0 when absent; always equal to meta.attempt when set
	Trigger       string
	CorrelationID string
	Data          json.RawMessage // a JSON value or nil
	Meta          json.RawMessage // a JSON object or nil
}

// TimeFormat is the layout of the record's `ts`: RFC 3339, UTC, milliseconds.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// Time is when the store accepted the event.
func (e Event) Time() time.Time { return e.ID.Time() }

// wire is the record as it leaves nqd: every aliased pair of contract §2 is
// written in both spellings so both UI generations read it.
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

func (e Event) toWire(withPosition bool) wire {
	w := wire{
		Kind: e.Kind, Type: e.Kind, Subject: e.Subject,
		Flow: e.Flow, RunID: e.Flow, FlowName: e.FlowName,
		Step: e.Step, StepName: e.Step, Attempt: e.Attempt,
		Trigger: e.Trigger, CorrelationID: e.CorrelationID,
		Data: e.Data, Meta: e.Meta,
	}
	if withPosition {
		w.ID = e.ID.String()
		w.TS = e.Time().Format(TimeFormat)
	}
	return w
}

// MarshalJSON writes the record of contract §2.
func (e Event) MarshalJSON() ([]byte, error) {
	return json.Marshal(e.toWire(true))
}

// MarshalBody writes the record without `id` and `ts`: the form a store keeps,
// to which it adds the position it assigns.
func (e Event) MarshalBody() ([]byte, error) {
	return json.Marshal(e.toWire(false))
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
		Flow: first(w.Flow, w.RunID), FlowName: w.FlowName,
		Step: first(w.Step, w.StepName), Attempt: w.Attempt,
		Trigger: w.Trigger, CorrelationID: w.CorrelationID,
		Data: nullToNil(w.Data), Meta: nullToNil(w.Meta),
	}
	return nil
}

// DecodeStored reads a body written by MarshalBody and places it at id.
func DecodeStored(id ID, body []byte) (Event, error) {
	var e Event
	if err := e.UnmarshalJSON(body); err != nil {
		return Event{}, err
	}
	e.ID = id
	return e, nil
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
		e.Flow = run
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
