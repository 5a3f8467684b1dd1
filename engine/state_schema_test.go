package engine_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
)

// TestStateSchema: state writes are checked against the flow's state schema
// at write time: a bad value or an unknown key is refused and nothing of the
// report is stored; good ones are stored.
func TestStateSchema(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		ctx := t.Context()
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := newEngine(t, st, c)
		d := &flows.Definition{
			Name: "train", Entry: "train",
			Steps: map[string]flows.Step{"train": {Queue: "default"}},
			StateSchema: json.RawMessage(`{"type":"object","additionalProperties":false,"properties":{
				"status":{"type":"string","enum":["initializing","training","complete"]},
				"accuracy":{"type":"number","minimum":0,"maximum":1},
				"progress":{"type":"object","properties":{"pct":{"maximum":1},"phase":{"const":"fit"}}}}}`),
		}
		if err := e.PutDefinition(ctx, d); err != nil {
			t.Fatal(err)
		}
		started, err := e.Start(ctx, "train", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		jobs, err := e.Claim(ctx, []string{"default"}, 1, 0)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim: %v, %v", jobs, err)
		}
		ack := store.JobAck{Queue: jobs[0].Queue, ID: jobs[0].ID, Lease: jobs[0].Lease}
		set := func(key, value string) event.Event {
			return event.Event{Kind: "state.set", Data: json.RawMessage(`{"key":"` + key + `","value":` + value + `}`)}
		}
		count := func() int {
			evs, err := testkit.RangeKinds(ctx, st, store.Context{Type: "flow", ID: started.FlowID}, "state.set", "state.batch")
			if err != nil {
				t.Fatal(err)
			}
			return len(evs)
		}

		for _, bad := range [][]event.Event{
			{set("accuracy", "1.5")},
			{set("status", `"invalid"`)},
			{set("status", `"training"`), set("loss", "0.3")}, // the good one goes too
			{{Kind: "state.batch", Data: json.RawMessage(`{"operations":[{"type":"set","key":"accuracy","value":-1}]}`)}},
		} {
			_, err := e.Report(ctx, ack, bad, "")
			var se *engine.StateError
			if !errors.As(err, &se) || !errors.Is(err, engine.ErrStateInvalid) {
				t.Fatalf("Report(%s) = %v, want a StateError", bad[len(bad)-1].Data, err)
			}
		}
		// Each failing place of a value is named, one line each.
		_, err = e.Report(ctx, ack, []event.Event{set("progress", `{"pct":2,"phase":"eval"}`)}, "")
		var se *engine.StateError
		if !errors.As(err, &se) || se.Fields["state.progress.pct"] == "" || se.Fields["state.progress.phase"] == "" || len(se.Fields) != 2 {
			t.Fatalf("Report(progress) = %v, want state.progress.pct and state.progress.phase named", err)
		}
		if _, err := e.Report(ctx, ack, []event.Event{set("loss", "0.3")}, ""); !errors.As(err, &se) || se.Fields["state.loss"] == "" {
			t.Fatalf("Report(loss) = %v, want state.loss named", err)
		}
		if n := count(); n != 0 {
			t.Fatalf("%d state events stored after refused reports, want 0", n)
		}
		if _, err := e.Report(ctx, ack, []event.Event{set("status", `"training"`), set("accuracy", "0.95"),
			{Kind: "state.batch", Data: json.RawMessage(`{"operations":[{"type":"set","key":"status","value":"complete"},{"type":"delete","key":"accuracy"}]}`)}}, ""); err != nil {
			t.Fatalf("good state writes: %v", err)
		}
		if n := count(); n != 3 {
			t.Fatalf("%d state events stored, want 3", n)
		}
	})
}
