package reducers

import (
	"encoding/json"

	"github.com/nqd-dev/nqd/internal/jsonscan"
)

// decode reads what it can of raw into v, exactly as json.Unmarshal would
// (see the flex types for the leniency). Payloads come from clients and old
// writers, so a field of the wrong type is left as it was rather than
// failing the event.
//
// Folding spent most of its time in a reflection-based Unmarshal of every
// payload, so payloads are scanned once and set, a method of v's type, reads
// only the members the reducer uses. set reports false for a member that
// needs encoding/json's own rules (a key matching a field only ignoring case,
// a repeated array); the whole payload is then read by encoding/json, so both
// paths give the same result. v is passed to encoding/json only through a
// copy, so that on the fast path it stays on the caller's stack.
func decode[T any](raw json.RawMessage, v *T, set func(key, val []byte) bool) {
	if len(raw) == 0 || raw[0] != '{' {
		return
	}
	before := *v
	if jsonscan.Object(raw, func(key, val []byte) bool {
		return jsonscan.Plain(key) && set(key, val)
	}) {
		return
	}
	w := new(T)
	*w = before
	_ = json.Unmarshal(raw, w)
	*v = *w
}

// other reports whether key, a member no field of a payload matched exactly,
// also matches none of names ignoring case; a key that does is left to
// encoding/json.
func other(key []byte, names []string) bool { return !jsonscan.Folds(key, names) }

// setString sets *s to val when val is a string; encoding/json leaves a
// string field unchanged for null and for values of another type.
func setString(s *string, val []byte) bool {
	if v, ok := jsonscan.String(val); ok {
		*s = v
	}
	return true
}

// startedData is what flow.started carries.
type startedData struct {
	Name     string          `json:"name"`
	FlowName string          `json:"flowName"`
	Queue    string          `json:"queue"`
	Input    json.RawMessage `json:"input"` // only read through rawValue, which copies it
}

var startedNames = []string{"name", "flowName", "queue", "input"}

func (d *startedData) set(key, val []byte) bool {
	switch string(key) {
	case "name":
		return setString(&d.Name, val)
	case "flowName":
		return setString(&d.FlowName, val)
	case "queue":
		return setString(&d.Queue, val)
	case "input":
		d.Input = val
		return true
	}
	return other(key, startedNames)
}

// endedData is what flow.completed, flow.failed and flow.cancelled carry.
type endedData struct {
	Result   json.RawMessage `json:"result"`
	Error    flexText        `json:"error"`
	Reason   flexText        `json:"reason"`
	Duration flexInt         `json:"duration"`
}

var endedNames = []string{"result", "error", "reason", "duration"}

func (d *endedData) set(key, val []byte) bool {
	switch string(key) {
	case "result":
		d.Result = val
		return true
	case "error":
		_ = d.Error.UnmarshalJSON(val)
		return true
	case "reason":
		_ = d.Reason.UnmarshalJSON(val)
		return true
	case "duration":
		_ = d.Duration.UnmarshalJSON(val)
		return true
	}
	return other(key, endedNames)
}

var stepNames = []string{
	"error", "message", "willRetry", "retry", "nextAttempt", "attempt", "maxAttempts", "nextRetryAt",
	"scheduledAt", "result", "duration", "awaitType", "reason", "stepName", "stepKey", "step",
}

func (p *stepPayload) set(key, val []byte) bool {
	switch string(key) {
	case "error":
		_ = p.Error.UnmarshalJSON(val)
		return true
	case "message":
		_ = p.Message.UnmarshalJSON(val)
		return true
	case "willRetry":
		_ = p.WillRetry.UnmarshalJSON(val)
		return true
	case "retry":
		_ = p.Retry.UnmarshalJSON(val)
		return true
	case "nextAttempt":
		_ = p.NextAttempt.UnmarshalJSON(val)
		return true
	case "attempt":
		_ = p.Attempt.UnmarshalJSON(val)
		return true
	case "maxAttempts":
		_ = p.MaxAttempts.UnmarshalJSON(val)
		return true
	case "nextRetryAt":
		_ = p.NextRetryAt.UnmarshalJSON(val)
		return true
	case "scheduledAt":
		_ = p.ScheduledAt.UnmarshalJSON(val)
		return true
	case "result":
		p.Result = val
		return true
	case "duration":
		_ = p.Duration.UnmarshalJSON(val)
		return true
	case "awaitType":
		return setString(&p.AwaitType, val)
	case "reason":
		_ = p.Reason.UnmarshalJSON(val)
		return true
	case "stepName":
		return setString(&p.StepName, val)
	case "stepKey":
		return setString(&p.StepKey, val)
	case "step":
		return setString(&p.Step, val)
	}
	return other(key, stepNames)
}

// awaitData is what the v0.4/v0.5 engine's await.* events carry.
type awaitData struct {
	Position    string          `json:"position"`
	AwaitType   string          `json:"awaitType"`
	TriggerData json.RawMessage `json:"triggerData"`
}

var awaitNames = []string{"position", "awaitType", "triggerData"}

func (d *awaitData) set(key, val []byte) bool {
	switch string(key) {
	case "position":
		return setString(&d.Position, val)
	case "awaitType":
		return setString(&d.AwaitType, val)
	case "triggerData":
		d.TriggerData = val
		return true
	}
	return other(key, awaitNames)
}

// logData is what a log event carries, read as plain strings: logs are most
// of a stream, so flowLog takes the flexible reading only when both texts
// are missing.
type logData struct {
	Level   string `json:"level"`
	Msg     string `json:"msg"`
	Message string `json:"message"`
}

var logNames = []string{"level", "msg", "message"}

func (d *logData) set(key, val []byte) bool {
	switch string(key) {
	case "level":
		return setString(&d.Level, val)
	case "msg":
		return setString(&d.Msg, val)
	case "message":
		return setString(&d.Message, val)
	}
	return other(key, logNames)
}

// levelData is the part of a log event's payload a fold reads; the message
// is read from the payload when the entry is.
type levelData struct {
	Level string `json:"level"`
}

func (d *levelData) set(key, val []byte) bool {
	if string(key) != "level" {
		return other(key, logNames[:1])
	}
	// The usual levels are constants rather than a string per entry.
	switch string(val) {
	case `"info"`:
		d.Level = "info"
	case `"debug"`:
		d.Level = "debug"
	case `"warn"`:
		d.Level = "warn"
	case `"error"`:
		d.Level = "error"
	default:
		return setString(&d.Level, val)
	}
	return true
}

type logText struct {
	Msg     flexText `json:"msg"`
	Message flexText `json:"message"`
}

func (d *logText) set(key, val []byte) bool {
	switch string(key) {
	case "msg":
		_ = d.Msg.UnmarshalJSON(val)
		return true
	case "message":
		_ = d.Message.UnmarshalJSON(val)
		return true
	}
	return other(key, logNames[1:])
}

// emitData is nqd's `{event, payload}` or the v0.3 module's `{name, ...payload}`.
type emitData struct {
	Event   string          `json:"event"`
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload"`
}

var emitNames = []string{"event", "name", "payload"}

func (d *emitData) set(key, val []byte) bool {
	switch string(key) {
	case "event":
		return setString(&d.Event, val)
	case "name":
		return setString(&d.Name, val)
	case "payload":
		d.Payload = val
		return true
	}
	return other(key, emitNames)
}

var opNames = []string{"type", "key", "value"}

func (op *stateOp) set(key, val []byte) bool {
	switch string(key) {
	case "type":
		return setString(&op.Type, val)
	case "key":
		return setString(&op.Key, val)
	case "value":
		op.Value = val
		return true
	}
	return other(key, opNames)
}

type batchData struct {
	Operations []stateOp `json:"operations"`
}

func (d *batchData) set(key, val []byte) bool {
	switch string(key) {
	case "operations":
		// encoding/json decodes a repeated array into the elements already
		// there; leave that to it.
		if d.Operations != nil {
			return false
		}
		switch val[0] {
		case 'n':
			d.Operations = nil
		case '[':
			ops := []stateOp{}
			ok := jsonscan.Array(val, func(elem []byte) bool {
				var op stateOp
				if elem[0] == '{' && !jsonscan.Object(elem, func(k, v []byte) bool {
					return jsonscan.Plain(k) && op.set(k, v)
				}) {
					return false
				}
				ops = append(ops, op)
				return true
			})
			if !ok {
				return false
			}
			d.Operations = ops
		}
		return true
	}
	return other(key, []string{"operations"})
}

// triggerData is what every trigger event may carry.
type triggerData struct {
	Type     string          `json:"type"`
	Config   json.RawMessage `json:"config"`
	Payload  json.RawMessage `json:"payload"`
	Source   string          `json:"source"`
	Reason   flexText        `json:"reason"`
	Duration flexInt         `json:"duration"`
}

var triggerNames = []string{"type", "config", "payload", "source", "reason", "duration"}

func (d *triggerData) set(key, val []byte) bool {
	switch string(key) {
	case "type":
		return setString(&d.Type, val)
	case "config":
		d.Config = val
		return true
	case "payload":
		d.Payload = val
		return true
	case "source":
		return setString(&d.Source, val)
	case "reason":
		_ = d.Reason.UnmarshalJSON(val)
		return true
	case "duration":
		_ = d.Duration.UnmarshalJSON(val)
		return true
	}
	return other(key, triggerNames)
}
