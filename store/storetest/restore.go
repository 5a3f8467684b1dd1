package storetest

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// RestoreStore is a backend that can restore archived runs.
type RestoreStore interface {
	EngineStore
	store.Restorer
}

// runRestore checks store.Restorer against fresh stores from newStore: a run
// read from one store and restored into another reads back equal, with its
// ids, its index entries and its record; a restore into a stream that has
// events is refused and writes nothing.
func runRestore(t *testing.T, newStore func(t *testing.T) RestoreStore) {
	ctx := t.Context()
	c := store.Context{Type: "flow", ID: "r1"}
	src := newStore(t)
	for _, batch := range [][]event.Event{
		{{Kind: "flow.started", FlowName: "f1"}},
		{{Kind: "step.started", Step: "a"}, {Kind: "step.completed", Step: "a"}},
		{{Kind: "flow.completed"}},
	} {
		if _, err := src.Append(ctx, c, batch, store.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := src.Range(ctx, c, store.RangeQuery{})
	must(t, err)
	record := store.RunMeta{FlowName: "f1", RunID: "r1", Status: store.RunCompleted, StartedAt: int64(evs[0].ID.MS),
		CompletedAt: int64(evs[3].ID.MS), StepCount: 1, CompletedSteps: 1, Version: 4}

	dst := newStore(t)
	must(t, dst.Restore(ctx, c, evs, &record))
	got, err := dst.Range(ctx, c, store.RangeQuery{})
	must(t, err)
	if diff := cmp.Diff(evs, got); diff != "" {
		t.Fatalf("restored events differ (-archived +restored):\n%s", diff)
	}
	info, err := dst.Info(ctx, c)
	must(t, err)
	if info.Length != 4 || info.FirstID != evs[0].ID || info.LastID != evs[3].ID {
		t.Errorf("Info = %+v, want 4 events %s..%s", info, evs[0].ID, evs[3].ID)
	}
	for _, ix := range []store.Index{{Type: "flow"}, {Type: "flow", Name: "f1"}} {
		page, err := dst.IndexList(ctx, ix, 0, 10)
		must(t, err)
		want := []store.IndexEntry{{ID: "r1", Score: int64(evs[0].ID.MS)}}
		if diff := cmp.Diff(want, page.Entries); diff != "" {
			t.Errorf("index %+v (-want +got):\n%s", ix, diff)
		}
	}
	meta, err := dst.RunMeta(ctx, "f1", "r1")
	must(t, err)
	if diff := cmp.Diff(record, meta); diff != "" {
		t.Errorf("run record (-archived +restored):\n%s", diff)
	}
	runs, err := dst.ListRuns(ctx, "f1", store.RunCompleted, 0, 10)
	must(t, err)
	if len(runs.Runs) != 1 || runs.Runs[0].RunID != "r1" {
		t.Errorf("completed runs of f1 = %+v, want r1", runs.Runs)
	}

	// A second restore, and one into a stream that has events, write
	// nothing.
	if err := dst.Restore(ctx, c, evs, &record); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("restore over a restored run: %v, want ErrConflict", err)
	}
	if err := src.Restore(ctx, c, evs, nil); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("restore over a live run: %v, want ErrConflict", err)
	}
	if info, err := src.Info(ctx, c); err != nil || info.Length != 4 {
		t.Fatalf("live run after a refused restore: %+v, %v; want 4 events", info, err)
	}

	// Appends go on after the restored ids.
	res, err := dst.Append(ctx, c, []event.Event{{Kind: "log.info"}}, store.AppendOptions{})
	must(t, err)
	if res.Events[0].ID.Compare(evs[3].ID) <= 0 {
		t.Errorf("append after restore got id %s, not after %s", res.Events[0].ID, evs[3].ID)
	}

	// Ids out of order are refused.
	other := store.Context{Type: "flow", ID: "r2"}
	backwards := []event.Event{evs[1], evs[0]}
	if err := dst.Restore(ctx, other, backwards, nil); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("restore of ids out of order: %v, want ErrInvalid", err)
	}
	if info, err := dst.Info(ctx, other); err != nil || info.Length != 0 {
		t.Errorf("refused restore wrote %+v, %v", info, err)
	}
}
