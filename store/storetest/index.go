package storetest

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

func hasMember(p store.IndexPage, id string) bool {
	for _, e := range p.Entries {
		if e.ID == id {
			return true
		}
	}
	return false
}

func memberScore(t *testing.T, s store.Store, ix store.Index, id string) (int64, bool) {
	t.Helper()
	page := mustIndexList(t, s, ix, 0, 1000)
	for _, e := range page.Entries {
		if e.ID == id {
			return e.Score, true
		}
	}
	return 0, false
}

func testIndexFirstEvent(t *testing.T, s store.Store) {
	c := store.Context{Type: "job", ID: "job-1"}
	first := mustAppend(t, s, c, evs(c, "job.created", 0, 1))
	mustAppend(t, s, c, evs(c, "job.updated", 1, 2))

	ix := store.Index{Type: "job"}
	want := store.IndexPage{Entries: []store.IndexEntry{{ID: c.ID, Score: int64(first[0].ID.MS)}}, Total: 1}
	if d := cmp.Diff(want, mustIndexList(t, s, ix, 0, 10)); d != "" {
		t.Errorf("index after appends (-want +got):\n%s", d)
	}
	// Other types' indexes are untouched.
	if p := mustIndexList(t, s, store.Index{Type: "flow"}, 0, 10); p.Total != 0 || len(p.Entries) != 0 {
		t.Errorf("flow index = %+v, want empty", p)
	}
}

func testIndexFlowStarted(t *testing.T, s store.Store) {
	run1 := store.Context{Type: "flow", ID: "run-1"}
	run2 := store.Context{Type: "flow", ID: "run-2"}
	other := store.Context{Type: "flow", ID: "run-3"}

	// run-1 has an event before its start, so its named-index score is the
	// start's time while the type index keeps the first event's.
	pre := mustAppend(t, s, run1, evs(run1, "log", 0, 1))
	start1 := mustAppend(t, s, run1, []event.Event{{Kind: "flow.started", Subject: run1.ID, RunID: run1.ID, FlowName: "billing"}})
	start2 := mustAppend(t, s, run2, []event.Event{{Kind: "flow.start", Subject: run2.ID, RunID: run2.ID, FlowName: "billing"}})
	mustAppend(t, s, other, []event.Event{{Kind: "flow.started", Subject: other.ID, RunID: other.ID, FlowName: "shipping"}})
	// A repeated start keeps the first score.
	mustAppend(t, s, run1, []event.Event{{Kind: "flow.started", Subject: run1.ID, RunID: run1.ID, FlowName: "billing"}})

	page := mustIndexList(t, s, store.Index{Type: "flow", Name: "billing"}, 0, 10)
	want := []store.IndexEntry{{ID: run1.ID, Score: int64(start1[0].ID.MS)}, {ID: run2.ID, Score: int64(start2[0].ID.MS)}}
	if d := cmp.Diff(want, page.Entries, cmpopts.SortSlices(func(a, b store.IndexEntry) bool { return a.ID < b.ID })); d != "" {
		t.Errorf("flows:billing (-want +got):\n%s", d)
	}
	if page.Total != 2 {
		t.Errorf("flows:billing Total = %d, want 2", page.Total)
	}
	if got, ok := memberScore(t, s, store.Index{Type: "flow"}, run1.ID); !ok || got != int64(pre[0].ID.MS) {
		t.Errorf("type index score of %s = %d, %v; want %d (its first event)", run1.ID, got, ok, pre[0].ID.MS)
	}
	if p := mustIndexList(t, s, store.Index{Type: "flow", Name: "shipping"}, 0, 10); p.Total != 1 || !hasMember(p, other.ID) {
		t.Errorf("flows:shipping = %+v, want only %s", p, other.ID)
	}
}

func testIndexTriggerRegistered(t *testing.T, s store.Store) {
	// A webhook context registers a trigger: the trigger index gains it even
	// though the context's type is not trigger.
	c := store.Context{Type: "webhook", ID: "hook-1"}
	mustAppend(t, s, c, evs(c, "webhook.created", 0, 1))
	reg := mustAppend(t, s, c, []event.Event{{Kind: "trigger.registered", Subject: c.ID, Data: json.RawMessage(`{"type":"webhook"}`)}})

	want := store.IndexPage{Entries: []store.IndexEntry{{ID: c.ID, Score: int64(reg[0].ID.MS)}}, Total: 1}
	if d := cmp.Diff(want, mustIndexList(t, s, store.Index{Type: "trigger"}, 0, 10)); d != "" {
		t.Errorf("trigger index (-want +got):\n%s", d)
	}
	if p := mustIndexList(t, s, store.Index{Type: "webhook"}, 0, 10); !hasMember(p, c.ID) {
		t.Errorf("webhook index = %+v, want %s", p, c.ID)
	}
}

func testIndexAddKeepsFirstScore(t *testing.T, s store.Store) {
	ix := store.Index{Type: "report", Name: "daily"}
	ctx := t.Context()
	for _, add := range []store.IndexEntry{{ID: "a", Score: 100}, {ID: "a", Score: 500}, {ID: "b", Score: 50}, {ID: "a", Score: 1}} {
		if err := s.IndexAdd(ctx, ix, add.ID, add.Score); err != nil {
			t.Fatalf("IndexAdd(%+v): %v", add, err)
		}
	}
	want := store.IndexPage{Entries: []store.IndexEntry{{ID: "a", Score: 100}, {ID: "b", Score: 50}}, Total: 2}
	if d := cmp.Diff(want, mustIndexList(t, s, ix, 0, 10)); d != "" {
		t.Errorf("index (-want +got):\n%s", d)
	}
}

func testIndexListPaging(t *testing.T, s store.Store) {
	ix := store.Index{Type: "flow", Name: "paging"}
	members := []store.IndexEntry{
		{ID: "e", Score: 50}, {ID: "c", Score: 300}, {ID: "b", Score: 100},
		{ID: "a", Score: 300}, {ID: "d", Score: 200}, {ID: "f", Score: 1_700_000_000_000},
	}
	for _, m := range members {
		if err := s.IndexAdd(t.Context(), ix, m.ID, m.Score); err != nil {
			t.Fatalf("IndexAdd(%+v): %v", m, err)
		}
	}
	// Newest first; equal scores by id ascending.
	order := []store.IndexEntry{
		{ID: "f", Score: 1_700_000_000_000}, {ID: "a", Score: 300}, {ID: "c", Score: 300},
		{ID: "d", Score: 200}, {ID: "b", Score: 100}, {ID: "e", Score: 50},
	}
	for _, tc := range []struct{ offset, limit, from, to int }{
		{0, 10, 0, 6},
		{0, 2, 0, 2},
		{2, 2, 2, 4},
		{4, 2, 4, 6},
		{5, 10, 5, 6},
		{6, 2, 6, 6},
		{100, 5, 6, 6},
		{1, 3, 1, 4},
	} {
		page := mustIndexList(t, s, ix, tc.offset, tc.limit)
		want := store.IndexPage{Entries: order[tc.from:tc.to], Total: int64(len(order))}
		if d := cmp.Diff(want, page, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("IndexList(offset %d, limit %d) (-want +got):\n%s", tc.offset, tc.limit, d)
		}
	}
}

func testIndexListEmpty(t *testing.T, s store.Store) {
	page := mustIndexList(t, s, store.Index{Type: "flow", Name: "nothing"}, 0, 10)
	if page.Total != 0 || len(page.Entries) != 0 {
		t.Errorf("empty index = %+v, want no entries and Total 0", page)
	}
}
