package event

import (
	"bytes"
	"encoding/json"
	"strings"
)

// IsLog reports whether kind is a log line: `log`, or `log.<level>`.
func IsLog(kind string) bool { return kind == "log" || strings.HasPrefix(kind, "log.") }

// LogTextAliases writes a log event's text in both spellings: the v0.3 UI reads
// `data.message` and the later SDKs write `data.msg`, so a record carrying one
// gets the other too. Data that is not an object, or has neither field, is
// returned as is. ok is false when both are sent and differ.
func LogTextAliases(data json.RawMessage) (out json.RawMessage, ok bool) {
	if len(data) == 0 || data[0] != '{' {
		return data, true
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return data, true
	}
	msg, hasMsg := m["msg"]
	message, hasMessage := m["message"]
	switch {
	case hasMsg && hasMessage:
		return data, bytes.Equal(compact(msg), compact(message))
	case hasMsg:
		m["message"] = msg
	case hasMessage:
		m["msg"] = message
	default:
		return data, true
	}
	b, err := json.Marshal(m)
	if err != nil {
		return data, true
	}
	return b, true
}

func compact(raw json.RawMessage) []byte {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}
