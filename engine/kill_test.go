package engine_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
)

// TestDiamondWorkerKilledBetweenBranches: parallelA's emit is delivered
// twice, and the worker dies holding parallelB. Once its lease runs out
// another worker takes parallelB over, and final runs once with both
// branches' payloads.
func TestDiamondWorkerKilledBetweenBranches(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		ctx := t.Context()
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := newEngine(t, st, c)
		// The diamond example with retries, as examples/flows has it: a step
		// whose worker died is tried again rather than failing the run.
		d, err := flows.LoadDir("../examples/flows")
		if err != nil {
			t.Fatal(err)
		}
		for _, def := range d {
			if def.Name == "diamond" {
				if err := e.PutDefinition(ctx, def); err != nil {
					t.Fatal(err)
				}
			}
		}
		started, err := e.Start(ctx, "diamond", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		claim := func(step string) store.Job {
			t.Helper()
			jobs, err := e.Claim(ctx, []string{"default"}, 1, 0)
			if err != nil || len(jobs) != 1 || jobs[0].Step != step {
				t.Fatalf("claim = %+v, %v; want %s", jobs, err, step)
			}
			return jobs[0]
		}
		finish := func(j store.Job, emits ...string) {
			t.Helper()
			ack := store.JobAck{Queue: j.Queue, ID: j.ID, Lease: j.Lease}
			for _, name := range emits {
				ev := event.Event{Kind: "emit", Data: json.RawMessage(fmt.Sprintf(`{"event":%q,"payload":{"from":%q}}`, name, j.Step))}
				if _, err := e.Report(ctx, ack, []event.Event{ev}, ""); err != nil {
					t.Fatalf("emit %s: %v", name, err)
				}
			}
			if err := e.Complete(ctx, ack, nil); err != nil {
				t.Fatalf("complete %s: %v", j.Step, err)
			}
		}

		finish(claim("start"), "step.a.trigger", "step.b.trigger")
		first, second := claim("parallelA"), claim("parallelB")
		if first.Step != "parallelA" {
			first, second = second, first
		}
		finish(first, "step.a.done", "step.a.done")
		// The worker dies holding parallelB: nothing more comes from it.
		if jobs, _ := e.Claim(ctx, []string{"default"}, 5, 0); len(jobs) != 0 {
			t.Fatalf("claimed %+v while parallelB was held and final not ready", jobs)
		}
		c.Add(11 * time.Second)
		again := claim("parallelB")
		if again.Attempt != 2 || again.ID != second.ID {
			t.Errorf("takeover = %+v, want %s at attempt 2", again, second.ID)
		}
		finish(again, "step.b.done")
		fin := claim("final")
		var in map[string]map[string]string
		if err := json.Unmarshal(fin.Input, &in); err != nil || in["step.a.done"]["from"] != "parallelA" || in["step.b.done"]["from"] != "parallelB" {
			t.Errorf("final input = %s, want both branches' payloads", fin.Input)
		}
		finish(fin)
		if jobs, _ := e.Claim(ctx, []string{"default"}, 5, 0); len(jobs) != 0 {
			t.Errorf("claimed %+v after final", jobs)
		}
		got := kinds(t, st, started.FlowID)
		want := map[string]int{"step.completed final": 1, "flow.completed": 1, "emit parallelA": 1, "step.completed parallelB": 1}
		counts := map[string]int{}
		for k := range want {
			counts[k] = count(got, k)
		}
		if diff := cmp.Diff(want, counts); diff != "" {
			t.Errorf("events %v (-want +got):\n%s", got, diff)
		}
	})
}
