package event

import (
	"encoding/json"
	"strconv"

	"github.com/nqd-dev/nqd/internal/jsonscan"
)

// appendWire appends the record exactly as json.Marshal(e.toWire(withPosition))
// writes it, without reflection: every append encodes its events once for
// the store and once for the answer, and reflection was most of that
// encoding. Strings and payloads that need escaping or compacting go
// through encoding/json itself; FuzzMarshal checks the two agree.
func (e Event) appendWire(b []byte, withPosition bool) ([]byte, error) {
	b = append(b, '{')
	if withPosition {
		b = append(b, `"id":"`...)
		b = strconv.AppendUint(b, e.ID.MS, 10)
		b = append(b, '-')
		b = strconv.AppendUint(b, e.ID.Seq, 10)
		b = append(b, `","ts":"`...)
		b = e.Time().AppendFormat(b, TimeFormat)
		b = append(b, `",`...)
	}
	b = appendMember(b, `"kind":`, e.Kind)
	b = appendMember(b, `,"type":`, e.Kind)
	b = appendMember(b, `,"subject":`, e.Subject)
	if e.RunID != "" {
		b = appendMember(b, `,"flow":`, e.RunID)
		b = appendMember(b, `,"runId":`, e.RunID)
	}
	if e.FlowName != "" {
		b = appendMember(b, `,"flowName":`, e.FlowName)
	}
	if e.Step != "" {
		b = appendMember(b, `,"step":`, e.Step)
		b = appendMember(b, `,"stepName":`, e.Step)
	}
	if e.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(e.Attempt), 10)
	}
	if e.Trigger != "" {
		b = appendMember(b, `,"trigger":`, e.Trigger)
	}
	if e.CorrelationID != "" {
		b = appendMember(b, `,"correlationId":`, e.CorrelationID)
	}
	var err error
	if len(e.Data) > 0 {
		if b, err = appendRaw(append(b, `,"data":`...), e.Data); err != nil {
			return nil, err
		}
	}
	if len(e.Meta) > 0 {
		if b, err = appendRaw(append(b, `,"meta":`...), e.Meta); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendMember appends name (quoted, with its colon) and s as a JSON string.
func appendMember(b []byte, name, s string) []byte {
	return AppendString(append(b, name...), s)
}

// AppendString appends s as a JSON string, as encoding/json writes it; one
// with nothing to escape (names, kinds, ids) is copied without an
// allocation.
func AppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendRaw appends a JSON value as encoding/json writes a RawMessage:
// validated, compacted, and with <, >, & and U+2028/U+2029 escaped. A value
// that is valid and has none of those to change is copied as it is.
func appendRaw(b []byte, raw json.RawMessage) ([]byte, error) {
	if unchanged(raw) && jsonscan.Valid(raw) {
		return append(b, raw...), nil
	}
	q, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	return append(b, q...), nil
}

// unchanged reports whether compacting and HTML-escaping raw would leave it
// as it is: no whitespace outside strings, and no byte the escaping
// rewrites (U+2028 and U+2029 both start with 0xE2).
func unchanged(raw []byte) bool {
	inString := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; c {
		case '<', '>', '&', 0xE2:
			return false
		case ' ', '\t', '\n', '\r':
			if !inString {
				return false
			}
		case '\\':
			if inString {
				i++ // the escaped byte is never a quote that ends the string
			}
		case '"':
			inString = !inString
		}
	}
	return true
}

// AppendV05 appends the record as the v0.4/v0.5 UI's WebSocket routes carry
// it (docs/compatibility.md, "The v0.5 generation"): `ts` in epoch
// milliseconds rather than RFC 3339, the v0.5 field names only, and `stepId`
// (the one sent with the event, in meta.stepId, else
// `<runId>__<step>__attempt-<n>` as the Node module built it). The v0.3 UI's
// routes carry MarshalJSON's form: one event, two renderings, both here.
func (e Event) AppendV05(b []byte) ([]byte, error) {
	b = append(b, `{"id":"`...)
	b = strconv.AppendUint(b, e.ID.MS, 10)
	b = append(b, '-')
	b = strconv.AppendUint(b, e.ID.Seq, 10)
	b = append(b, `","ts":`...)
	b = strconv.AppendUint(b, e.ID.MS, 10)
	b = appendMember(b, `,"type":`, KindV05(e.Kind))
	if e.RunID != "" {
		b = appendMember(b, `,"runId":`, e.RunID)
	}
	if e.FlowName != "" {
		b = appendMember(b, `,"flowName":`, e.FlowName)
	}
	if e.Step != "" {
		b = appendMember(b, `,"stepName":`, e.Step)
	}
	if id := e.stepID(); id != "" {
		b = appendMember(b, `,"stepId":`, id)
	}
	if e.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(e.Attempt), 10)
	}
	if e.Trigger != "" {
		b = appendMember(b, `,"triggerName":`, e.Trigger)
	}
	b = append(b, `,"data":`...)
	if len(e.Data) == 0 {
		b = append(b, "{}"...)
	} else {
		var err error
		if b, err = appendRaw(b, e.Data); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// KindV05 is kind as the v0.5 UI spells it: its timeline knows a
// cancelled run only as flow.canceled.
func KindV05(kind string) string {
	if kind == "flow.cancelled" {
		return "flow.canceled"
	}
	return kind
}

// stepID is the step attempt's id the v0.5 UI reads: the one the event was
// sent with, else the Node module's `<runId>__<step>__attempt-<n>`; "" for
// an event of no step.
func (e Event) stepID() string {
	var id string
	if len(e.Meta) > 0 {
		jsonscan.Fields(e.Meta, []string{"stepId"}, func(_ int, val []byte) bool {
			id, _ = jsonscan.String(val)
			return false
		})
	}
	if id != "" || e.Step == "" || e.RunID == "" {
		return id
	}
	attempt := max(e.Attempt, 1)
	return e.RunID + "__" + e.Step + "__attempt-" + strconv.Itoa(attempt)
}
