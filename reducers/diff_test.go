package reducers_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/reducers"
)

func TestDiff(t *testing.T) {
	r := reducers.Flow{Limits: reducers.Limits{Logs: 1}}
	a := mustFold(t, r,
		ev(1, "state.set", data(`{"key":"gone","value":1}`)),
		ev(2, "state.set", data(`{"key":"same","value":[1,2]}`)),
		ev(3, "state.set", data(`{"key":"moved","value":"x"}`)),
		ev(4, "step.started", step("s")),
		ev(5, "log", data(`{"msg":"old"}`)),
	)
	b, err := r.Fold(a, []event.Event{
		ev(6, "state.delete", data(`{"key":"gone"}`)),
		ev(7, "state.set", data(`{"key":"moved","value":"y"}`)),
		ev(8, "state.set", data(`{"key":"new","value":true}`)),
		ev(9, "state.set", data(`{"key":"same","value":[1, 2]}`)),
		ev(10, "log", data(`{"msg":"new"}`)),
	})
	if err != nil {
		t.Fatal(err)
	}
	d, err := reducers.Diff(a, b)
	if err != nil {
		t.Fatal(err)
	}
	want := reducers.KeyedDelta{
		Added:   map[string]json.RawMessage{"new": json.RawMessage(`true`)},
		Removed: map[string]json.RawMessage{"gone": json.RawMessage(`1`)},
		Changed: map[string]reducers.Change{"moved": {From: json.RawMessage(`"x"`), To: json.RawMessage(`"y"`)}},
	}
	if diff := cmp.Diff(want, d.Keyed["state"]); diff != "" {
		t.Errorf("state delta (-want +got):\n%s", diff)
	}
	if _, ok := d.Keyed["steps"]; ok {
		t.Errorf("steps reported changed: %+v", d.Keyed["steps"])
	}
	logs := d.Lists["logs"]
	if len(logs.Added) != 1 || entryMsg(t, logs.Added[0]) != "new" || !cmp.Equal(logs.Removed, []string{"5-0"}) {
		t.Errorf("logs delta = %+v, want the new entry added and 5-0 dropped", logs)
	}
	if got := d.Changed["eventCount"]; string(got.From) != "5" || string(got.To) != "10" {
		t.Errorf("eventCount change = %s -> %s, want 5 -> 10", got.From, got.To)
	}

	if d, err := reducers.Diff(b, b); err != nil || !d.Empty() {
		t.Errorf("Diff(b, b) = %+v, %v; want empty", d, err)
	}
	if d, err := reducers.Diff(nil, b); err != nil || len(d.Keyed["state"].Added) != 3 {
		t.Errorf("Diff(nil, b) = %+v, %v; want every key added", d, err)
	}
	if _, err := reducers.Diff(a, reducers.Generic{}.Init()); !errors.Is(err, reducers.ErrStateType) {
		t.Errorf("Diff of two reducers' states: %v, want ErrStateType", err)
	}
}

func entryMsg(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var e reducers.LogEntry
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	return e.Msg
}
