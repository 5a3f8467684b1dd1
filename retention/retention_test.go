package retention_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/reducers"
	"github.com/nqd-dev/nqd/retention"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
)

// t0 starts the clock that both the store's id stamping and the reaper read.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func newTestStore(t *testing.T, clk *testkit.Clock) *boltstore.Store {
	t.Helper()
	return bolttest.Open(t, boltstore.Options{
		Now:       clk.Now,
		Retention: store.Retention{Completed: 7 * 24 * time.Hour, Failed: 30 * 24 * time.Hour},
	})
}

// runFlow stores a run of steps step events ending in status, as the engine
// would: a record per update, the terminal status written with its event.
func runFlow(t *testing.T, s *boltstore.Store, clk *testkit.Clock, run, status string, steps int) {
	t.Helper()
	ctx := t.Context()
	m := store.RunMeta{FlowName: "pipeline", RunID: run, Status: store.RunRunning, StartedAt: clk.Now().UnixMilli(), StepCount: steps}
	started := event.Event{Kind: "flow.started", Subject: run, RunID: run, FlowName: "pipeline"}
	if _, err := s.UpdateRun(ctx, store.RunUpdate{Meta: m, Events: []event.Event{started}}); err != nil {
		t.Fatal(err)
	}
	c := store.Context{Type: "flow", ID: run}
	for i := range steps {
		clk.Add(time.Second)
		step := fmt.Sprintf("s%d", i)
		evs := []event.Event{
			{Kind: "step.started", Subject: run, RunID: run, FlowName: "pipeline", Step: step, Attempt: 1},
			{Kind: "step.completed", Subject: run, RunID: run, FlowName: "pipeline", Step: step, Attempt: 1, Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))},
		}
		if _, err := s.Append(ctx, c, evs, store.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Add(time.Second)
	m.Version, m.Status, m.CompletedAt, m.CompletedSteps = 1, status, clk.Now().UnixMilli(), steps
	end := event.Event{Kind: "flow." + status, Subject: run, RunID: run, FlowName: "pipeline"}
	if _, err := s.UpdateRun(ctx, store.RunUpdate{Meta: m, PrevStatus: store.RunRunning, Events: []event.Event{end}}); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, s *boltstore.Store, run string) []event.Event {
	t.Helper()
	evs, err := s.Range(t.Context(), store.Context{Type: "flow", ID: run}, store.RangeQuery{})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func foldJSON(t *testing.T, evs []event.Event) string {
	t.Helper()
	st, err := reducers.Fold(reducers.For("flow"), evs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSweepExpiresOnScheduleAndArchivesFirst(t *testing.T) {
	clk := testkit.NewClock(t0)
	s := newTestStore(t, clk)
	arch, err := archive.NewDir(t.TempDir(), clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	r := retention.New(s, retention.Options{Archive: arch, Now: clk.Now, Batch: 2, Logger: testkit.Logger(t)})

	runFlow(t, s, clk, "ok-1", store.RunCompleted, 3)
	runFlow(t, s, clk, "ok-2", store.RunCompleted, 1)
	runFlow(t, s, clk, "ok-3", store.RunCompleted, 2)
	runFlow(t, s, clk, "bad-1", store.RunFailed, 2)
	running := store.RunMeta{FlowName: "pipeline", RunID: "live-1", Status: store.RunRunning, StartedAt: clk.Now().UnixMilli()}
	if _, err := s.UpdateRun(t.Context(), store.RunUpdate{Meta: running, Events: []event.Event{{Kind: "flow.started", Subject: "live-1", RunID: "live-1", FlowName: "pipeline"}}}); err != nil {
		t.Fatal(err)
	}
	before := readAll(t, s, "ok-1")
	meta, err := s.RunMeta(t.Context(), "pipeline", "ok-1")
	if err != nil {
		t.Fatal(err)
	}

	sweep := func(want int) {
		t.Helper()
		n, err := r.Sweep(t.Context())
		if err != nil || n != want {
			t.Fatalf("Sweep at %s = %d, %v; want %d", clk.Now().Sub(t0), n, err, want)
		}
	}
	clk.Add(6 * 24 * time.Hour)
	sweep(0)
	clk.Add(24 * time.Hour)
	sweep(3) // the three completed runs, over two batches
	if got := readAll(t, s, "ok-1"); len(got) != 0 {
		t.Fatalf("expired run still has %d events", len(got))
	}
	if len(readAll(t, s, "bad-1")) == 0 || len(readAll(t, s, "live-1")) == 0 {
		t.Fatal("a failed or running run expired on the completed schedule")
	}

	m, got, err := arch.Get(t.Context(), store.Context{Type: "flow", ID: "ok-1"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, got); diff != "" {
		t.Errorf("archived events (-live +archived):\n%s", diff)
	}
	if foldJSON(t, before) != foldJSON(t, got) {
		t.Errorf("state from the archive differs from the live state")
	}
	// Time travel: the state after the second event, from either source.
	at := store.RangeQuery{Through: before[2].ID}
	if foldJSON(t, archive.Filter(before, at)) != foldJSON(t, archive.Filter(got, at)) {
		t.Errorf("time travel over the archive differs")
	}
	var rec store.RunMeta
	if err := json.Unmarshal(m.Record, &rec); err != nil || !cmp.Equal(meta, rec) {
		t.Errorf("archived record %s, want %+v (%v)", m.Record, meta, err)
	}

	clk.Add(23 * 24 * time.Hour)
	sweep(1)
	if len(readAll(t, s, "bad-1")) != 0 {
		t.Fatal("failed run kept after 30 days")
	}
	clk.Add(10 * 365 * 24 * time.Hour)
	sweep(0)
	if len(readAll(t, s, "live-1")) != 1 {
		t.Fatal("running run expired")
	}
	list, err := arch.List(t.Context(), "flow")
	if err != nil || len(list) != 4 {
		t.Fatalf("archive holds %d runs, %v; want 4", len(list), err)
	}
}

// failingArchive refuses every Put, as a full disk would.
type failingArchive struct{ archive.Archive }

var errDiskFull = errors.New("disk full")

func (failingArchive) Put(ctx context.Context, c store.Context, record json.RawMessage, events iter.Seq2[event.Event, error]) (archive.Manifest, error) {
	return archive.Manifest{}, errDiskFull
}

func TestSweepKeepsRunWhenArchivingFails(t *testing.T) {
	clk := testkit.NewClock(t0)
	s := newTestStore(t, clk)
	r := retention.New(s, retention.Options{Archive: failingArchive{}, Now: clk.Now, Logger: testkit.Logger(t)})
	runFlow(t, s, clk, "ok-1", store.RunCompleted, 1)
	clk.Add(8 * 24 * time.Hour)
	n, err := r.Sweep(t.Context())
	if n != 0 || !errors.Is(err, errDiskFull) {
		t.Fatalf("Sweep = %d, %v; want 0 and the archive's error", n, err)
	}
	if len(readAll(t, s, "ok-1")) == 0 {
		t.Fatal("run deleted although it was not archived")
	}
	due, err := s.ExpiredRuns(t.Context(), clk.Now().UnixMilli(), 10)
	if err != nil || len(due) != 1 {
		t.Fatalf("due runs after a failed archive: %v, %v; want the run still due", due, err)
	}
}

func TestEventsPagesThroughLongStreams(t *testing.T) {
	clk := testkit.NewClock(t0)
	s := newTestStore(t, clk)
	c := store.Context{Type: "flow", ID: "long"}
	var batch []event.Event
	for i := range 2500 {
		batch = append(batch, event.Event{Kind: "log", Subject: "long", Data: json.RawMessage(fmt.Sprint(i))})
	}
	if _, err := s.Append(t.Context(), c, batch[:1000], store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(t.Context(), c, batch[1000:], store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for e, err := range retention.Events(t.Context(), s, c) {
		if err != nil {
			t.Fatal(err)
		}
		if string(e.Data) != fmt.Sprint(n) {
			t.Fatalf("event %d holds %s", n, e.Data)
		}
		n++
	}
	if n != 2500 {
		t.Fatalf("read %d events, want 2500", n)
	}
}
