package engine

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/nqd-dev/nqd/event"
)

// This file builds the events the engine writes into a run's stream.

// flowEvent is an event of run r's stream.
func flowEvent(r *run, kind, step string, data any) event.Event {
	ev := event.Event{Kind: kind, Subject: r.meta.RunID, RunID: r.meta.RunID, FlowName: r.meta.FlowName, Step: step}
	if data != nil {
		ev.Data = mustJSON(data)
	}
	return ev
}

func withAttempt(ev event.Event, attempt int, extra map[string]any) event.Event {
	m := map[string]any{"attempt": attempt}
	for k, v := range extra {
		m[k] = v
	}
	ev.Attempt = attempt
	ev.Meta = mustJSON(m)
	return ev
}

// jobMeta is the meta of an event about attempt of job id,
// {"attempt":…,"jobId":…}, as json.Marshal writes the map of the two,
// without the map: every report and completion makes one or more.
func jobMeta(attempt int, id string) json.RawMessage {
	b := strconv.AppendInt(append(make([]byte, 0, 32+len(id)), `{"attempt":`...), int64(attempt), 10)
	b = append(b, `,"jobId":`...)
	q, err := json.Marshal(id)
	if err != nil {
		panic(err) // a string always encodes
	}
	return append(append(b, q...), '}')
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only for values built here from JSON-safe types
	}
	return b
}

func isoMS(ms int64) string { return time.UnixMilli(ms).UTC().Format(event.TimeFormat) }
