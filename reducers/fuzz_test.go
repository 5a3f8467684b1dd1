package reducers_test

import (
	"encoding/json"
	"slices"
	"strconv"
	"testing"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/reducers"
)

var fuzzKinds = []string{
	"flow.started", "flow.start", "flow.completed", "flow.failed", "flow.cancelled", "flow.cancel",
	"step.started", "step.completed", "step.failed", "step.retry",
	"step.await.time", "step.await.event", "step.await.trigger", "step.resumed", "step.await.timeout",
	"await.registered", "await.resolved", "await.timeout",
	"log", "log.warn", "runner.log", "emit",
	"state.set", "state.delete", "state.batch", "state.snapshot",
	"trigger.registered", "trigger.fired", "trigger.timeout", "trigger.cancelled",
	"something.else",
}

var fuzzSteps = []string{"", "a", "b", "c"}

// fuzzData are payload shapes; %s is replaced by the fuzzer's text, as a JSON
// string, or as itself when it is JSON.
var fuzzData = []string{
	``,
	`%s`,
	`{"error":%s,"willRetry":true,"nextAttempt":2}`,
	`{"error":%s,"message":%s,"attempt":"3"}`,
	`{"key":%s,"value":%s}`,
	`{"operations":[{"type":"set","key":%s,"value":1},{"type":"delete","key":"k"}]}`,
	`{"event":%s,"payload":%s}`,
	`{"name":%s,"x":1}`,
	`{"level":%s,"msg":%s}`,
	`{"position":%s,"awaitType":"webhook","triggerData":%s}`,
	`{"duration":%s,"result":%s,"reason":%s}`,
	`{"stepKey":%s}`,
}

// fuzzEvents turns fuzz bytes into events: four bytes per event choose the
// kind, the step, the payload shape and how far the id moves on.
func fuzzEvents(ops []byte, text string) []event.Event {
	// Long texts only make the fuzzer slow: payload size changes no branch.
	if len(text) > 64 {
		text = text[:64]
	}
	value := text
	if !json.Valid([]byte(text)) {
		value = strconv.Quote(text)
	}
	var evs []event.Event
	id := event.ID{MS: 1}
	for i := 0; i+3 < len(ops) && len(evs) < 256; i += 4 {
		if ops[i+3] == 0 {
			id.Seq++
		} else {
			id = event.ID{MS: id.MS + uint64(ops[i+3])}
		}
		e := event.Event{
			ID: id, Kind: fuzzKinds[int(ops[i])%len(fuzzKinds)], Subject: "ctx",
			Step: fuzzSteps[int(ops[i+1])%len(fuzzSteps)], Attempt: int(ops[i+1] >> 4),
		}
		if tmpl := fuzzData[int(ops[i+2])%len(fuzzData)]; tmpl != "" {
			d := []byte{}
			for j, part := range splitPercent(tmpl) {
				if j > 0 {
					d = append(d, value...)
				}
				d = append(d, part...)
			}
			if json.Valid(d) {
				e.Data = d
			}
		}
		evs = append(evs, e)
	}
	return evs
}

func splitPercent(s string) []string {
	var parts []string
	for {
		i := indexOf(s, "%s")
		if i < 0 {
			return append(parts, s)
		}
		parts, s = append(parts, s[:i]), s[i+2:]
	}
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// fuzzOps encodes events as fuzzEvents reads them, to seed the corpus with
// the scenarios' kind sequences.
func fuzzOps(evs []event.Event) []byte {
	var ops []byte
	prev := event.ID{MS: 1}
	for _, e := range evs {
		k := max(0, slices.Index(fuzzKinds, e.Kind))
		s := max(0, slices.Index(fuzzSteps, e.Step))
		step := byte(1)
		if e.ID.MS == prev.MS {
			step = 0
		}
		ops = append(ops, byte(k), byte(s), byte(len(evs)%len(fuzzData)), step)
		prev = e.ID
	}
	return ops
}

var fuzzReducers = []reducers.Reducer{
	reducers.Flow{Limits: reducers.Limits{Logs: 3, Emits: 2, Names: 3}},
	reducers.Trigger{},
	reducers.Generic{Limits: reducers.Limits{Names: 4}},
	reducers.Flow{},
}

// FuzzApply checks the reducers' invariants on arbitrary event sequences: no
// panic; the same events give the same state; every state passes Validate;
// folding in two parts equals folding at once; Apply one at a time equals
// Fold; and no Apply changes the state it was given.
func FuzzApply(f *testing.F) {
	for _, c := range scenarioCorpora(f) {
		f.Add(fuzzOps(c.evs), `"x"`, uint8(len(c.evs)/2), uint8(0))
	}
	f.Add([]byte{6, 1, 2, 1, 8, 1, 2, 1, 9, 1, 3, 0, 7, 1, 4, 1}, "boom", uint8(2), uint8(3))
	f.Add([]byte{22, 0, 4, 1, 23, 0, 4, 1, 25, 0, 1, 1}, `{"a":1}`, uint8(1), uint8(0))
	f.Add([]byte{26, 0, 1, 1, 27, 0, 6, 1, 28, 0, 10, 1}, `{"type":"webhook"}`, uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, ops []byte, text string, split, which uint8) {
		r := fuzzReducers[int(which)%len(fuzzReducers)]
		evs := fuzzEvents(ops, text)
		at := 0
		if len(evs) > 0 {
			at = int(split) % (len(evs) + 1)
		}

		whole, err := reducers.Fold(r, evs)
		if err != nil {
			t.Fatalf("Fold: %v", err)
		}
		if err := whole.Validate(); err != nil {
			t.Fatalf("Validate: %v", err)
		}
		want := marshal(t, whole)
		if again, _ := reducers.Fold(r, evs); marshal(t, again) != want {
			t.Fatal("folding the same events twice gave two states")
		}

		head, err := reducers.Fold(r, evs[:at])
		if err != nil {
			t.Fatalf("Fold head: %v", err)
		}
		headJSON := marshal(t, head)
		joined, err := r.Fold(head, evs[at:])
		if err != nil {
			t.Fatalf("Fold tail: %v", err)
		}
		if got := marshal(t, joined); got != want {
			t.Fatalf("fold(a+b) != fold(fold(a), b) at %d:\n%s\n%s", at, want, got)
		}

		s := head
		for _, e := range evs[at:] {
			if s, err = r.Apply(s, e); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if err := s.Validate(); err != nil {
				t.Fatalf("Validate after %s: %v", e.ID, err)
			}
		}
		if got := marshal(t, s); got != want {
			t.Fatalf("Apply one by one != Fold:\n%s\n%s", want, got)
		}
		if got := marshal(t, head); got != headJSON {
			t.Fatalf("extending a state changed it:\n%s\n%s", headJSON, got)
		}
		if d, err := reducers.Diff(whole, joined); err != nil || !d.Empty() {
			t.Fatalf("Diff of equal states = %+v, %v", d, err)
		}
		if _, err := reducers.Diff(head, whole); err != nil {
			t.Fatalf("Diff: %v", err)
		}
	})
}

func marshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return string(b)
}
