package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// RetentionStore is what retention needs of a backend.
type RetentionStore interface {
	EngineStore
	store.Checkpointer
	store.Retainer
}

// RetentionPolicy is the policy runRetention's stores are opened with: completed
// and failed runs on their own schedules, cancelled ones kept forever.
var RetentionPolicy = store.Retention{Completed: 7 * 24 * time.Hour, Failed: 30 * 24 * time.Hour}

// runRetention checks store.Retainer against stores from newStore, opened
// with RetentionPolicy. The clock is the scenario's own: due times
// come from the run records and "now" is an argument, so expiry is checked
// days ahead without waiting.
func runRetention(t *testing.T, newStore func(t *testing.T) RetentionStore) {
	t.Run("ExpiryBySchedule", func(t *testing.T) { testExpiryBySchedule(t, newStore(t)) })
	t.Run("ResumedRunIsNotDue", func(t *testing.T) { testResumedRunIsNotDue(t, newStore(t)) })
}

const retentionT0 = int64(1_700_000_000_000)

const day = int64(24 * time.Hour / time.Millisecond)

// finishRun creates run as running (with an event and a checkpoint), then
// makes it status at retentionT0 in one update with its terminal event.
func finishRun(t *testing.T, s RetentionStore, flow, run, status string) {
	t.Helper()
	ctx := t.Context()
	m := store.RunMeta{FlowName: flow, RunID: run, Status: store.RunRunning, StartedAt: retentionT0 - day}
	res, err := s.UpdateRun(ctx, store.RunUpdate{Meta: m, Events: []event.Event{{Kind: "flow.started", FlowName: flow, RunID: run, Subject: run}}})
	must(t, err)
	c := store.Context{Type: "flow", ID: run}
	must(t, s.PutCheckpoint(ctx, c, res.Events[0].ID, []byte(`{"n":1}`)))
	if status == store.RunRunning {
		return
	}
	m.Version, m.Status, m.CompletedAt = 1, status, retentionT0
	_, err = s.UpdateRun(ctx, store.RunUpdate{Meta: m, PrevStatus: store.RunRunning,
		Events: []event.Event{{Kind: "flow." + status, FlowName: flow, RunID: run, Subject: run}}})
	must(t, err)
}

func dueRuns(t *testing.T, s RetentionStore, now int64) []string {
	t.Helper()
	got, err := s.ExpiredRuns(t.Context(), now, 100)
	must(t, err)
	out := []string{}
	for _, r := range got {
		out = append(out, r.FlowName+":"+r.RunID)
	}
	return out
}

func testExpiryBySchedule(t *testing.T, s RetentionStore) {
	ctx := t.Context()
	finishRun(t, s, "ret", "done", store.RunCompleted)
	finishRun(t, s, "ret", "failed", store.RunFailed)
	finishRun(t, s, "ret", "cancelled", store.RunCancelled)
	finishRun(t, s, "ret", "running", store.RunRunning)

	if got := dueRuns(t, s, retentionT0+7*day-1); len(got) != 0 {
		t.Fatalf("due before any schedule: %v", got)
	}
	if got := dueRuns(t, s, retentionT0+7*day); !slices.Equal(got, []string{"ret:done"}) {
		t.Fatalf("due after 7 days: %v, want [ret:done]", got)
	}
	if err := s.DeleteExpiredRun(ctx, "ret", "failed", retentionT0+7*day); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("deleting the failed run after 7 days: got %v, want ErrConflict", err)
	}
	must(t, s.DeleteExpiredRun(ctx, "ret", "done", retentionT0+7*day))
	assertRunGone(t, s, "ret", "done")
	if err := s.DeleteExpiredRun(ctx, "ret", "done", retentionT0+7*day); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("deleting twice: got %v, want ErrConflict", err)
	}

	if got := dueRuns(t, s, retentionT0+30*day-1); len(got) != 0 {
		t.Fatalf("due before 30 days: %v", got)
	}
	if got := dueRuns(t, s, retentionT0+10_000*day); !slices.Equal(got, []string{"ret:failed"}) {
		t.Fatalf("due far ahead: %v, want only [ret:failed] (cancelled and running runs never expire)", got)
	}
	must(t, s.DeleteExpiredRun(ctx, "ret", "failed", retentionT0+30*day))
	assertRunGone(t, s, "ret", "failed")

	for _, run := range []string{"cancelled", "running"} {
		if _, err := s.RunMeta(ctx, "ret", run); err != nil {
			t.Errorf("run %s: %v, want it kept", run, err)
		}
		if info := mustInfo(t, s, store.Context{Type: "flow", ID: run}); info.Length != 1 && info.Length != 2 {
			t.Errorf("run %s has %d events, want its stream kept", run, info.Length)
		}
	}
	page, err := s.ListRuns(ctx, "ret", "", 0, 10)
	must(t, err)
	if page.Total != 2 || len(page.Runs) != 2 {
		t.Errorf("flow index after expiry: %+v, want the two kept runs", page)
	}
}

func assertRunGone(t *testing.T, s RetentionStore, flow, run string) {
	t.Helper()
	ctx := t.Context()
	c := store.Context{Type: "flow", ID: run}
	if info := mustInfo(t, s, c); info.Length != 0 {
		t.Errorf("run %s: stream left with %d events", run, info.Length)
	}
	if _, err := s.RunMeta(ctx, flow, run); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("run %s: record: got %v, want ErrNotFound", run, err)
	}
	if _, _, err := s.Checkpoint(ctx, c, event.ID{MS: ^uint64(0)}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("run %s: checkpoint: got %v, want ErrNotFound", run, err)
	}
	for _, st := range []string{"", store.RunCompleted, store.RunFailed} {
		page, err := s.ListRuns(ctx, flow, st, 0, 100)
		must(t, err)
		for _, r := range page.Runs {
			if r.RunID == run {
				t.Errorf("run %s still listed (status filter %q)", run, st)
			}
		}
	}
	for _, e := range mustIndexList(t, s, store.Index{Type: "flow"}, 0, 1000).Entries {
		if e.ID == run {
			t.Errorf("run %s still in the flow type index", run)
		}
	}
}

func testResumedRunIsNotDue(t *testing.T, s RetentionStore) {
	ctx := t.Context()
	finishRun(t, s, "ret", "again", store.RunFailed)
	if got := dueRuns(t, s, retentionT0+30*day); len(got) != 1 {
		t.Fatalf("due: %v, want the failed run", got)
	}
	m, err := s.RunMeta(ctx, "ret", "again")
	must(t, err)
	prev := m.Status
	m.Status, m.CompletedAt = store.RunRunning, 0
	_, err = s.UpdateRun(ctx, store.RunUpdate{Meta: m, PrevStatus: prev})
	must(t, err)
	if got := dueRuns(t, s, retentionT0+10_000*day); len(got) != 0 {
		t.Fatalf("due after the run resumed: %v, want none", got)
	}
	if err := s.DeleteExpiredRun(ctx, "ret", "again", retentionT0+10_000*day); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("deleting a resumed run: got %v, want ErrConflict", err)
	}
	if _, err := s.RunMeta(ctx, "ret", "again"); err != nil {
		t.Fatalf("resumed run: %v", err)
	}
}
