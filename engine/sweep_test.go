package engine_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
)

// Sweep fixtures start their clock at the wall clock, because the store
// stamps events with it and a sweep measures idleness from the newest one.

const stallAfter = 5 * time.Minute

func sweep(t *testing.T, e *engine.Engine, flow, run string) string {
	t.Helper()
	class, err := e.SweepRun(t.Context(), flow, run, stallAfter)
	if err != nil {
		t.Fatal(err)
	}
	return class
}

func TestSweepLeavesHealthyWaitingAlone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		c := testkit.NewClock(time.Now())
		e := newEngine(t, st, c)
		awaitFlow(t, e, "approve", &flows.Await{Type: "trigger", Timeout: time.Hour.Milliseconds()})
		run := startAwaiting(t, e, c, "approve")
		before := kinds(t, st, run)
		c.Add(2 * stallAfter)
		if got := sweep(t, e, "approve", run); got != engine.SweepWaiting {
			t.Errorf("class = %s, want %s", got, engine.SweepWaiting)
		}
		if after := kinds(t, st, run); len(after) != len(before) {
			t.Errorf("events after sweep = %v, want %v", after, before)
		}
		if m, _ := st.RunMeta(t.Context(), "approve", run); m.Status != store.RunAwaiting {
			t.Errorf("status = %s, want awaiting", m.Status)
		}
	})
}

func TestSweepFiresOverdueAwaitOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		c := testkit.NewClock(time.Now())
		e := newEngine(t, st, c)
		awaitFlow(t, e, "approve", &flows.Await{Type: "trigger", Timeout: 5_000})
		run := startAwaiting(t, e, c, "approve")
		c.Add(6 * time.Second)
		if got := sweep(t, e, "approve", run); got != engine.SweepOverdue {
			t.Errorf("class = %s, want %s", got, engine.SweepOverdue)
		}
		// The engine's own timer fires afterwards and must find nothing
		// left to time out.
		if err := e.Tick(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := sweep(t, e, "approve", run); got != engine.SweepGone {
			t.Errorf("second sweep class = %s, want %s", got, engine.SweepGone)
		}
		if got := countKind(t, st, store.Context{Type: "flow", ID: run}, "step.await.timeout"); got != 1 {
			t.Errorf("step.await.timeout = %d, want 1", got)
		}
		if m, _ := st.RunMeta(t.Context(), "approve", run); m.Status != store.RunFailed {
			t.Errorf("status = %s, want failed (no onTimeout step)", m.Status)
		}
	})
}

func TestSweepFlagsStuckRunOnceAndRedispatches(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		c := testkit.NewClock(time.Now())
		e := newEngine(t, st, c)
		awaitFlow(t, e, "approve", &flows.Await{Type: "trigger"})
		s, err := e.Start(t.Context(), "approve", json.RawMessage(`{}`), "")
		if err != nil {
			t.Fatal(err)
		}
		// A worker takes the entry job and dies: its lease runs out and
		// nothing more is written.
		jobs, err := e.Claim(t.Context(), []string{"default"}, 1, 0)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim: %v %v", jobs, err)
		}
		c.Add(stallAfter / 2)
		if got := sweep(t, e, "approve", s.FlowID); got != engine.SweepMoving {
			t.Errorf("class before the threshold = %s, want %s", got, engine.SweepMoving)
		}
		c.Add(stallAfter)
		if got := sweep(t, e, "approve", s.FlowID); got != engine.SweepStuck {
			t.Errorf("class = %s, want %s", got, engine.SweepStuck)
		}
		c.Add(stallAfter)
		if got := sweep(t, e, "approve", s.FlowID); got != engine.SweepFlagged {
			t.Errorf("second sweep class = %s, want %s", got, engine.SweepFlagged)
		}
		stalled, err := testkit.RangeKinds(t.Context(), st, store.Context{Type: "flow", ID: s.FlowID}, "flow.stalled")
		if err != nil {
			t.Fatal(err)
		}
		if len(stalled) != 1 {
			t.Fatalf("flow.stalled = %d events, want 1", len(stalled))
		}
		var d struct {
			IdleMs         int64    `json:"idleMs"`
			Reason         string   `json:"reason"`
			PreviousStatus string   `json:"previousStatus"`
			Steps          []string `json:"steps"`
		}
		if err := json.Unmarshal(stalled[0].Data, &d); err != nil {
			t.Fatal(err)
		}
		if d.IdleMs < stallAfter.Milliseconds() || d.Reason == "" || d.PreviousStatus != store.RunRunning || len(d.Steps) != 1 || d.Steps[0] != "start" {
			t.Errorf("flow.stalled data = %s", stalled[0].Data)
		}
		// The re-dispatched job is handed out again at the same attempt.
		again, err := e.Claim(t.Context(), []string{"default"}, 1, 0)
		if err != nil || len(again) != 1 || again[0].Step != "start" {
			t.Fatalf("claim after re-dispatch: %v %v", again, err)
		}
		if again[0].Lease == jobs[0].Lease {
			t.Error("re-dispatched job kept the dead worker's lease")
		}
	})
}

func TestSweepLeavesLeasedJobAlone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		c := testkit.NewClock(time.Now())
		e := engine.New(st, engine.Options{Now: c.Now, Lease: 3 * stallAfter})
		awaitFlow(t, e, "approve", &flows.Await{Type: "trigger"})
		s, err := e.Start(t.Context(), "approve", json.RawMessage(`{}`), "")
		if err != nil {
			t.Fatal(err)
		}
		if jobs, err := e.Claim(t.Context(), []string{"default"}, 1, 0); err != nil || len(jobs) != 1 {
			t.Fatalf("claim: %v %v", jobs, err)
		}
		c.Add(2 * stallAfter)
		if got := sweep(t, e, "approve", s.FlowID); got != engine.SweepMoving {
			t.Errorf("class = %s, want %s", got, engine.SweepMoving)
		}
		if got := countKind(t, st, store.Context{Type: "flow", ID: s.FlowID}, "flow.stalled"); got != 0 {
			t.Errorf("flow.stalled = %d, want 0", got)
		}
	})
}

func TestSweepRepairsOrphanedIndex(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		c := testkit.NewClock(time.Now())
		e := newEngine(t, st, c)
		awaitFlow(t, e, "approve", &flows.Await{Type: "trigger"})
		s, err := e.Start(t.Context(), "approve", json.RawMessage(`{}`), "")
		if err != nil {
			t.Fatal(err)
		}
		// The terminal event reached the stream; the record write that
		// should have come with it did not.
		end := event.Event{Kind: "flow.completed", Subject: s.FlowID, RunID: s.FlowID, FlowName: "approve", Data: json.RawMessage(`{}`)}
		if _, err := st.Append(t.Context(), store.Context{Type: "flow", ID: s.FlowID}, []event.Event{end}, store.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		if got := sweep(t, e, "approve", s.FlowID); got != engine.SweepOrphaned {
			t.Errorf("class = %s, want %s", got, engine.SweepOrphaned)
		}
		m, err := st.RunMeta(t.Context(), "approve", s.FlowID)
		if err != nil || m.Status != store.RunCompleted || m.CompletedAt == 0 {
			t.Fatalf("record = %+v, %v; want completed", m, err)
		}
		for status, want := range map[string]int{store.RunRunning: 0, store.RunCompleted: 1} {
			page, err := st.ListRuns(t.Context(), "approve", status, 0, 10)
			if err != nil || len(page.Runs) != want {
				t.Errorf("ListRuns(%s) = %v, %v; want %d runs", status, page.Runs, err, want)
			}
		}
		repaired, err := testkit.RangeKinds(t.Context(), st, store.Context{Type: "flow", ID: s.FlowID}, "flow.index.repaired")
		if err != nil || len(repaired) != 1 {
			t.Fatalf("flow.index.repaired: %v %v", repaired, err)
		}
		var d struct{ From, To string }
		_ = json.Unmarshal(repaired[0].Data, &d)
		if d.From != store.RunRunning || d.To != store.RunCompleted {
			t.Errorf("flow.index.repaired data = %s", repaired[0].Data)
		}
		if _, err := st.Job(t.Context(), store.JobRef{Queue: "default", ID: s.ID}); err == nil {
			t.Error("the repaired run's queued job is still there")
		}
	})
}
