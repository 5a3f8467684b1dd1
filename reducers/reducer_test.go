package reducers_test

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/reducers"
)

// ev builds an event at ms milliseconds; fill sets the rest.
func ev(ms uint64, kind string, fill ...func(*event.Event)) event.Event {
	e := event.Event{ID: event.ID{MS: ms}, Kind: kind, Subject: "run-1", RunID: "run-1"}
	for _, f := range fill {
		f(&e)
	}
	return e
}

func step(name string) func(*event.Event) { return func(e *event.Event) { e.Step = name } }
func data(js string) func(*event.Event)   { return func(e *event.Event) { e.Data = json.RawMessage(js) } }
func meta(js string) func(*event.Event)   { return func(e *event.Event) { e.Meta = json.RawMessage(js) } }
func attempt(n int) func(*event.Event)    { return func(e *event.Event) { e.Attempt = n } }

func mustFold(t testing.TB, r reducers.Reducer, evs ...event.Event) reducers.State {
	t.Helper()
	s, err := reducers.Fold(r, evs)
	if err != nil {
		t.Fatalf("fold: %v", err)
	}
	if err := s.Validate(); err != nil {
		t.Fatalf("folded state invalid: %v", err)
	}
	return s
}

// fieldsOf is a state's JSON form as a map, for comparing chosen fields.
func fieldsOf(t testing.TB, s any) map[string]any {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	return m
}

// checkFields compares the fields of want, a JSON object, with the same fields
// of got's JSON form; a field want sets to null must be absent.
func checkFields(t *testing.T, want string, got reducers.State) {
	t.Helper()
	var w map[string]any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	all := fieldsOf(t, got)
	g := map[string]any{}
	for k := range w {
		if v, ok := all[k]; ok {
			g[k] = v
		} else {
			g[k] = nil
		}
	}
	if diff := cmp.Diff(w, g); diff != "" {
		t.Errorf("state (-want +got):\n%s", diff)
	}
}

type applyCase struct {
	name    string
	prior   []event.Event
	ev      event.Event
	want    string // a JSON object: the fields of the state to check
	wantErr error
}

func runApplyCases(t *testing.T, r reducers.Reducer, cases []applyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prior := mustFold(t, r, tc.prior...)
			before := fieldsOf(t, prior)
			got, err := r.Apply(prior, tc.ev)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Apply error %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(before, fieldsOf(t, prior)); diff != "" {
				t.Errorf("Apply changed its input (-before +after):\n%s", diff)
			}
			if err != nil {
				if got != prior {
					t.Errorf("Apply returned %v on error, want its input", got)
				}
				return
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
			checkFields(t, tc.want, got)
		})
	}
}

func TestFlowApply(t *testing.T) {
	started := ev(1000, "flow.started", data(`{"name":"f"}`))
	s1 := ev(1001, "step.started", step("s"), meta(`{"attempt":1}`))
	runApplyCases(t, reducers.Flow{}, []applyCase{
		{
			name: "step.started creates a running step",
			ev:   ev(1000, "step.started", step("s")),
			want: `{"status":"running","steps":{"s":{"status":"running","attempt":1,"startedAt":"1970-01-01T00:00:01.000Z"}},"eventCount":1}`,
		},
		{
			name: "attempt from data when the envelope has none",
			ev:   ev(1000, "step.started", step("s"), data(`{"attempt":"3"}`)),
			want: `{"steps":{"s":{"status":"running","attempt":3,"startedAt":"1970-01-01T00:00:01.000Z"}}}`,
		},
		{
			name: "step name from data.stepKey",
			ev:   ev(1000, "step.started", data(`{"stepKey":"k"}`)),
			want: `{"steps":{"k":{"status":"running","attempt":1,"startedAt":"1970-01-01T00:00:01.000Z"}},"ignored":null}`,
		},
		{
			name: "a step event naming no step is ignored",
			ev:   ev(1000, "step.completed"),
			want: `{"steps":{},"ignored":1,"eventCount":1,"lastEventId":"1000-0"}`,
		},
		{
			name:  "non-final failure retries",
			prior: []event.Event{started, s1},
			ev:    ev(1002, "step.failed", step("s"), data(`{"error":"boom","willRetry":true,"nextRetryAt":"soon"}`), meta(`{"attempt":1,"maxAttempts":3}`)),
			want:  `{"status":"running","steps":{"s":{"status":"retrying","attempt":1,"maxAttempts":3,"startedAt":"1970-01-01T00:00:01.001Z","error":"boom","nextRetryAt":"soon"}}}`,
		},
		{
			name:  "retry flag as a string",
			prior: []event.Event{started, s1},
			ev:    ev(1002, "step.failed", step("s"), data(`{"message":"boom","retry":"true"}`)),
			want:  `{"steps":{"s":{"status":"retrying","attempt":1,"startedAt":"1970-01-01T00:00:01.001Z","error":"boom"}}}`,
		},
		{
			name:  "final failure ends the step with data.message",
			prior: []event.Event{started, s1},
			ev:    ev(1011, "step.failed", step("s"), data(`{"message":"boom"}`)),
			want:  `{"status":"running","steps":{"s":{"status":"failed","attempt":1,"startedAt":"1970-01-01T00:00:01.001Z","completedAt":"1970-01-01T00:00:01.011Z","duration":10,"error":"boom"}}}`,
		},
		{
			name:  "v0.3 retry takes nextAttempt",
			prior: []event.Event{started, s1},
			ev:    ev(1002, "step.retry", step("s"), attempt(1), data(`{"attempt":1,"nextAttempt":2,"error":"e1","maxAttempts":3}`)),
			want:  `{"steps":{"s":{"status":"retrying","attempt":2,"maxAttempts":3,"startedAt":"1970-01-01T00:00:01.001Z","error":"e1"}}}`,
		},
		{
			name:  "retry without an attempt counts one up",
			prior: []event.Event{started, s1},
			ev:    ev(1002, "step.retry", step("s"), data(`{"reason":"again"}`)),
			want:  `{"steps":{"s":{"status":"retrying","attempt":2,"startedAt":"1970-01-01T00:00:01.001Z"}}}`,
		},
		{
			name: "retry of a step not seen before",
			ev:   ev(1002, "step.retry", step("s")),
			want: `{"steps":{"s":{"status":"retrying","attempt":1}}}`,
		},
		{
			name:  "await timeout",
			prior: []event.Event{started, s1, ev(1002, "step.await.event", step("s"), data(`{"eventKind":"x"}`))},
			ev:    ev(1502, "step.await.timeout", step("s"), data(`{"awaitType":"event","duration":500}`)),
			want:  `{"status":"running","steps":{"s":{"status":"timeout","attempt":1,"startedAt":"1970-01-01T00:00:01.001Z","completedAt":"1970-01-01T00:00:01.502Z","duration":501,"error":"Await timeout after 500ms"}},"awaits":{"s":{"step":"s","type":"event","status":"timeout","registeredAt":"1970-01-01T00:00:01.002Z","resolvedAt":"1970-01-01T00:00:01.502Z","data":{"eventKind":"x"}}}}`,
		},
		{
			name:  "a waiting step with nothing running makes the run awaiting",
			prior: []event.Event{started, s1},
			ev:    ev(1002, "step.await.time", step("s"), data(`{"resumeAt":"later"}`)),
			want:  `{"status":"awaiting","steps":{"s":{"status":"waiting","attempt":1,"startedAt":"1970-01-01T00:00:01.001Z","awaitType":"time","awaitData":{"resumeAt":"later"}}}}`,
		},
		{
			name:  "resumed clears the await fields",
			prior: []event.Event{started, s1, ev(1002, "step.await.time", step("s"), data(`{"resumeAt":"later"}`))},
			ev:    ev(1003, "step.resumed", step("s"), data(`{"reason":"Time reached"}`), meta(`{"awaitType":"time"}`)),
			want:  `{"status":"running","steps":{"s":{"status":"running","attempt":1,"startedAt":"1970-01-01T00:00:01.001Z"}}}`,
		},
		{
			name:  "completing a step clears its error",
			prior: []event.Event{started, s1, ev(1002, "step.failed", step("s"), data(`{"error":"e","willRetry":true}`))},
			ev:    ev(1003, "step.completed", step("s"), data(`{"result":{"ok":true}}`)),
			want:  `{"steps":{"s":{"status":"completed","attempt":1,"startedAt":"1970-01-01T00:00:01.001Z","completedAt":"1970-01-01T00:00:01.003Z","duration":2,"result":{"ok":true}}}}`,
		},
		{
			name:  "a run started by nqd is not inferred complete",
			prior: []event.Event{started, s1},
			ev:    ev(1003, "step.completed", step("s")),
			want:  `{"status":"running","completedAt":null}`,
		},
		{
			name:  "a run started by the Node module is",
			prior: []event.Event{ev(1000, "flow.start"), s1},
			ev:    ev(1003, "step.completed", step("s")),
			want:  `{"status":"completed","startedAt":"1970-01-01T00:00:01.000Z","completedAt":"1970-01-01T00:00:01.003Z","duration":3}`,
		},
		{
			name:  "flow.completed without a duration measures it",
			prior: []event.Event{started},
			ev:    ev(1500, "flow.completed", data(`{"result":[1]}`)),
			want:  `{"status":"completed","completedAt":"1970-01-01T00:00:01.500Z","duration":500,"result":[1]}`,
		},
		{
			name:  "flow.failed with an error object",
			prior: []event.Event{started},
			ev:    ev(1500, "flow.failed", data(`{"error":{"message":"step s failed"},"duration":7}`)),
			want:  `{"status":"failed","error":"step s failed","duration":7}`,
		},
		{
			name:  "flow.canceled spelling",
			prior: []event.Event{started},
			ev:    ev(1500, "flow.canceled", data(`{"reason":"stop"}`)),
			want:  `{"status":"cancelled","reason":"stop","completedAt":"1970-01-01T00:00:01.500Z"}`,
		},
		{
			name:  "flow.started after the end does not revive the run",
			prior: []event.Event{started, ev(1500, "flow.completed")},
			ev:    ev(1600, "flow.started"),
			want:  `{"status":"completed","startedAt":"1970-01-01T00:00:01.000Z"}`,
		},
		{
			name: "log with message and no level",
			ev:   ev(1000, "log", step("s"), attempt(2), data(`{"message":"hi","n":1}`)),
			want: `{"logs":[{"id":"1000-0","ts":"1970-01-01T00:00:01.000Z","step":"s","attempt":2,"level":"info","msg":"hi","data":{"message":"hi","n":1}}]}`,
		},
		{
			name: "log level from the kind",
			ev:   ev(1000, "log.error", data(`{"msg":"bad"}`)),
			want: `{"logs":[{"id":"1000-0","ts":"1970-01-01T00:00:01.000Z","level":"error","msg":"bad","data":{"msg":"bad"}}]}`,
		},
		{
			name: "v0.3 emit",
			ev:   ev(1000, "emit", data(`{"name":"a.done","x":1}`)),
			want: `{"emits":[{"id":"1000-0","ts":"1970-01-01T00:00:01.000Z","event":"a.done","payload":{"x":1}}],"emitted":{"a.done":1}}`,
		},
		{
			name: "emit without a name is ignored",
			ev:   ev(1000, "emit", data(`{"payload":1}`)),
			want: `{"emits":[],"emitted":{},"ignored":1}`,
		},
		{
			name: "state.set without a value stores null",
			ev:   ev(1000, "state.set", data(`{"key":"k"}`)),
			want: `{"state":{"k":null},"ignored":null}`,
		},
		{
			name:  "state.set keeps the value compacted",
			prior: []event.Event{ev(999, "state.set", data(`{"key":"k","value":1}`))},
			ev:    ev(1000, "state.set", data(`{"key":"k","value":{ "a" : [1, 2] }}`)),
			want:  `{"state":{"k":{"a":[1,2]}}}`,
		},
		{
			name:  "state.snapshot that is not an object is ignored",
			prior: []event.Event{ev(999, "state.set", data(`{"key":"k","value":1}`))},
			ev:    ev(1000, "state.snapshot", data(`[1]`)),
			want:  `{"state":{"k":1},"ignored":1}`,
		},
		{
			name: "unknown kind advances the position only",
			ev:   ev(1000, "something.else", data(`{"a":1}`)),
			want: `{"status":"running","steps":{},"ignored":1,"eventCount":1,"lastEventId":"1000-0"}`,
		},
		{
			name:    "an event at the state's position is out of order",
			prior:   []event.Event{started},
			ev:      ev(1000, "flow.completed"),
			wantErr: reducers.ErrOutOfOrder,
		},
		{
			name:    "an event without an id is out of order",
			ev:      event.Event{Kind: "flow.started"},
			wantErr: reducers.ErrOutOfOrder,
		},
	})
}

func TestTriggerApply(t *testing.T) {
	reg := ev(1000, "trigger.registered", func(e *event.Event) {
		e.Subject, e.Trigger, e.CorrelationID = "t-1", "t-1", "run-9"
		e.Data = json.RawMessage(`{"type":"webhook","url":"/x","timeout":60000}`)
	})
	fired := ev(2000, "trigger.fired", data(`{"payload":{"ok":true},"source":"webhook"}`))
	runApplyCases(t, reducers.Trigger{}, []applyCase{
		{
			name: "registered keeps its payload as config",
			ev:   reg,
			want: `{"status":"registered","trigger":"t-1","type":"webhook","config":{"type":"webhook","url":"/x","timeout":60000},"correlationId":"run-9","registeredAt":"1970-01-01T00:00:01.000Z"}`,
		},
		{
			name:  "fired",
			prior: []event.Event{reg},
			ev:    fired,
			want:  `{"status":"fired","firedAt":"1970-01-01T00:00:02.000Z","endedAt":"1970-01-01T00:00:02.000Z","payload":{"ok":true},"source":"webhook","fired":1}`,
		},
		{
			name:  "a timeout after the fire does not undo it",
			prior: []event.Event{reg, fired},
			ev:    ev(3000, "trigger.timeout", data(`{"duration":60000}`)),
			want:  `{"status":"fired","endedAt":"1970-01-01T00:00:02.000Z","duration":null}`,
		},
		{
			name:  "a second fire is counted but changes nothing else",
			prior: []event.Event{reg, fired},
			ev:    ev(3000, "trigger.fired", data(`{"payload":{"ok":false}}`)),
			want:  `{"status":"fired","payload":{"ok":true},"fired":2}`,
		},
		{
			name:  "timeout",
			prior: []event.Event{reg},
			ev:    ev(61000, "trigger.timeout", data(`{"duration":60000}`)),
			want:  `{"status":"timeout","endedAt":"1970-01-01T00:01:01.000Z","duration":60000,"firedAt":null}`,
		},
		{
			name:  "canceled spelling",
			prior: []event.Event{reg},
			ev:    ev(3000, "trigger.canceled", data(`{"reason":"run cancelled"}`)),
			want:  `{"status":"cancelled","reason":"run cancelled"}`,
		},
		{
			name:  "registering again re-arms it",
			prior: []event.Event{reg, fired},
			ev:    ev(4000, "trigger.registered", data(`{"type":"user","config":{"form":"approve"}}`)),
			want:  `{"status":"registered","type":"user","config":{"form":"approve"},"endedAt":null,"payload":null,"fired":1}`,
		},
		{
			name:  "unknown kind",
			prior: []event.Event{reg},
			ev:    ev(4000, "subscription.added"),
			want:  `{"status":"registered","ignored":1,"eventCount":2}`,
		},
	})
}

func TestGenericApply(t *testing.T) {
	runApplyCases(t, reducers.Generic{Limits: reducers.Limits{Names: 2}}, []applyCase{
		{
			name: "first event",
			ev:   ev(1000, "a"),
			want: `{"firstEventId":"1000-0","lastEventId":"1000-0","firstEventAt":"1970-01-01T00:00:01.000Z","kinds":{"a":1},"eventCount":1}`,
		},
		{
			name:  "kinds beyond the limit are counted apart",
			prior: []event.Event{ev(1000, "a"), ev(1001, "b"), ev(1002, "a")},
			ev:    ev(1003, "c"),
			want:  `{"firstEventId":"1000-0","lastEventId":"1003-0","kinds":{"a":2,"b":1},"otherKinds":1,"eventCount":4}`,
		},
	})
}

func TestFor(t *testing.T) {
	for typ, want := range map[string]reducers.Reducer{
		"flow": reducers.Flow{}, "trigger": reducers.Trigger{}, "webhook": reducers.Generic{}, "": reducers.Generic{},
	} {
		if got := reducers.For(typ); got != want {
			t.Errorf("For(%q) = %T, want %T", typ, got, want)
		}
	}
}

func TestApplyRejectsAnotherReducersState(t *testing.T) {
	flow := reducers.Flow{}.Init()
	for _, r := range []reducers.Reducer{reducers.Trigger{}, reducers.Generic{}} {
		got, err := r.Apply(flow, ev(1, "x"))
		if !errors.Is(err, reducers.ErrStateType) || got != flow {
			t.Errorf("%T.Apply(flow state) = %v, %v; want the input and ErrStateType", r, got, err)
		}
	}
	if _, err := (reducers.Flow{}).Apply(reducers.Generic{}.Init(), ev(1, "x")); !errors.Is(err, reducers.ErrStateType) {
		t.Errorf("Flow.Apply(generic state): %v, want ErrStateType", err)
	}
}

func TestApplyToNilIsInit(t *testing.T) {
	for _, r := range []reducers.Reducer{reducers.Flow{}, reducers.Trigger{}, reducers.Generic{}} {
		got, err := r.Apply(nil, ev(1, "x"))
		if err != nil || got.Count() != 1 || got.Position() != (event.ID{MS: 1}) {
			t.Errorf("%T.Apply(nil) = %v, %v; want one event folded", r, got, err)
		}
	}
}

// TestMLTrainingRun checks the ml-training run of testdata/seed000_training.txt:
// the final KV state, and the state as of 10:00:03 (time travel).
func TestMLTrainingRun(t *testing.T) {
	var run corpus
	for _, c := range scenarioCorpora(t) {
		if c.name == "seed000_training.txt" {
			run = c
		}
	}
	if len(run.evs) == 0 {
		t.Fatal("seed000_training.txt has no events")
	}
	kvAt := func(through event.ID) map[string]any {
		var evs []event.Event
		for _, e := range run.evs {
			if e.ID.Compare(through) <= 0 {
				evs = append(evs, e)
			}
		}
		return fieldsOf(t, mustFold(t, run.r, evs...))["state"].(map[string]any)
	}
	at := event.IDAt(mustTime(t, "2025-11-05T10:00:03Z"))
	if diff := cmp.Diff(map[string]any{"status": "training", "epoch": 2.0, "accuracy": 0.92}, kvAt(at)); diff != "" {
		t.Errorf("state at 10:00:03 (-want +got):\n%s", diff)
	}
	final := map[string]any{"status": "complete", "epoch": 2.0, "accuracy": 0.92, "model_version": "1.0"}
	if diff := cmp.Diff(final, kvAt(event.MaxID)); diff != "" {
		t.Errorf("final state (-want +got):\n%s", diff)
	}
}

// TestFoldEqualsApply checks, on every scenario, that Fold gives what Apply
// one event at a time gives, that folding a prefix and then the rest gives the
// same again, and that no Apply changes the state it was given.
func TestFoldEqualsApply(t *testing.T) {
	for _, c := range scenarioCorpora(t) {
		t.Run(c.name, func(t *testing.T) {
			want := mustJSON(t, mustFold(t, c.r, c.evs...))
			s := c.r.Init()
			var history []reducers.State
			var snapshots []string
			for _, e := range c.evs {
				history = append(history, s)
				snapshots = append(snapshots, mustJSON(t, s))
				next, err := c.r.Apply(s, e)
				if err != nil {
					t.Fatalf("Apply %s: %v", e.ID, err)
				}
				s = next
			}
			if got := mustJSON(t, s); got != want {
				t.Errorf("Apply one by one differs from Fold:\n%s", cmp.Diff(want, got))
			}
			for i, h := range history {
				if got := mustJSON(t, h); got != snapshots[i] {
					t.Fatalf("state before event %d changed after later Applies:\n%s", i, cmp.Diff(snapshots[i], got))
				}
				rest, err := c.r.Fold(h, c.evs[i:])
				if err != nil {
					t.Fatalf("Fold from %d: %v", i, err)
				}
				if got := mustJSON(t, rest); got != want {
					t.Fatalf("Fold(Fold(evs[:%d]), evs[%d:]) differs:\n%s", i, i, cmp.Diff(want, got))
				}
			}
		})
	}
}

// TestBranchesDoNotShare checks that two events applied to one state give two
// states that do not see each other's entries, although they share storage.
func TestBranchesDoNotShare(t *testing.T) {
	r := reducers.Flow{Limits: reducers.Limits{Logs: 4}}
	base := mustFold(t, r, ev(1, "log", data(`{"msg":"a"}`)), ev(2, "state.set", data(`{"key":"k","value":0}`)))
	left, _ := r.Apply(base, ev(3, "log", data(`{"msg":"left"}`)))
	right, _ := r.Apply(base, ev(3, "log", data(`{"msg":"right"}`)))
	left, _ = r.Apply(left, ev(4, "state.set", data(`{"key":"k","value":"left"}`)))
	msgs := func(s reducers.State) []string {
		var out []string
		for _, l := range s.(*reducers.FlowState).Logs() {
			out = append(out, l.Msg)
		}
		return out
	}
	if diff := cmp.Diff([]string{"a", "left"}, msgs(left)); diff != "" {
		t.Errorf("left logs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a", "right"}, msgs(right)); diff != "" {
		t.Errorf("right logs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a"}, msgs(base)); diff != "" {
		t.Errorf("base logs (-want +got):\n%s", diff)
	}
	if v, _ := right.(*reducers.FlowState).Value("k"); string(v) != "0" {
		t.Errorf("right k = %s, want 0", v)
	}
}

// TestConcurrentApply extends one cached state from many goroutines, as the
// server does when live events and reads race; run it with -race.
func TestConcurrentApply(t *testing.T) {
	r := reducers.Flow{Limits: reducers.Limits{Logs: 8}}
	base := mustFold(t, r, ev(1, "flow.started"), ev(2, "log", data(`{"msg":"base"}`)))
	var wg sync.WaitGroup
	results := make([]reducers.State, 8)
	for i := range results {
		wg.Go(func() {
			s := base
			for j := range 20 {
				s, _ = r.Apply(s, ev(uint64(10+j), "log", data(`{"msg":"x"}`)))
				_, _ = json.Marshal(base)
			}
			results[i] = s
		})
	}
	wg.Wait()
	want := mustJSON(t, results[0])
	for i, s := range results {
		if got := mustJSON(t, s); got != want {
			t.Errorf("goroutine %d got a different state:\n%s", i, cmp.Diff(want, got))
		}
	}
	if n := len(base.(*reducers.FlowState).Logs()); n != 1 {
		t.Errorf("base has %d logs after concurrent Applies, want 1", n)
	}
}

func TestLogsAreBounded(t *testing.T) {
	r := reducers.Flow{Limits: reducers.Limits{Logs: 3}}
	var s reducers.State = r.Init()
	for i := range 100 {
		var err error
		if s, err = r.Apply(s, ev(uint64(i+1), "log", data(`{"msg":"m"}`))); err != nil {
			t.Fatal(err)
		}
	}
	logs := s.(*reducers.FlowState).Logs()
	var ids []string
	for _, l := range logs {
		ids = append(ids, l.ID)
	}
	if diff := cmp.Diff([]string{"98-0", "99-0", "100-0"}, ids); diff != "" {
		t.Errorf("kept logs (-want +got):\n%s", diff)
	}
}

func TestFoldStopsAtTheFirstBadEvent(t *testing.T) {
	r := reducers.Flow{}
	s, err := reducers.Fold(r, []event.Event{ev(1, "flow.started"), ev(3, "log"), ev(2, "log"), ev(4, "log")})
	if !errors.Is(err, reducers.ErrOutOfOrder) {
		t.Fatalf("Fold error %v, want ErrOutOfOrder", err)
	}
	if s.Count() != 2 || s.Position() != (event.ID{MS: 3}) {
		t.Errorf("Fold stopped at %s after %d events, want 3-0 after 2", s.Position(), s.Count())
	}
}

func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}
