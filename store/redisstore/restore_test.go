package redisstore_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/redisstore"
)

// TestRestoreWritesRunUpdateHash checks that a restored run's record hash and
// trigger index entry are the ones live writes leave, so other producers read
// a restored run like any other.
func TestRestoreWritesRunUpdateHash(t *testing.T) {
	ctx := t.Context()
	livePrefix := redistest.Prefix(t)
	live, liveClient := newTestStore(t, redisstore.Options{Prefix: livePrefix})
	m := store.RunMeta{FlowName: "fl", RunID: "r1", Status: store.RunRunning, StartedAt: 1700000000123, StepCount: 3,
		EmittedEvents: map[string]int64{"a.done": 1700000000200}}
	if _, err := live.UpdateRun(ctx, store.RunUpdate{Meta: m, Events: []event.Event{{Kind: "flow.started", FlowName: "fl"}}}); err != nil {
		t.Fatal(err)
	}
	want, err := liveClient.HGetAll(ctx, live.KeyPrefixOf("r1")+":flows:fl:meta:r1").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 {
		t.Fatal("live run has no record hash")
	}
	c := store.Context{Type: "flow", ID: "r1"}
	evs, err := live.Range(ctx, c, store.RangeQuery{})
	if err != nil {
		t.Fatal(err)
	}

	prefix := redistest.Prefix(t)
	dst, client := newTestStore(t, redisstore.Options{Prefix: prefix})
	stored, err := live.RunMeta(ctx, "fl", "r1")
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.Restore(ctx, c, evs, &stored); err != nil {
		t.Fatal(err)
	}
	got, err := client.HGetAll(ctx, dst.KeyPrefixOf("r1")+":flows:fl:meta:r1").Result()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("restored record hash (-live +restored):\n%s", diff)
	}

	tc := store.Context{Type: "hook", ID: "h1"}
	trig := []event.Event{{ID: event.ID{MS: 1700000000500, Seq: 0}, Kind: "trigger.registered"}}
	if err := dst.Restore(ctx, tc, trig, nil); err != nil {
		t.Fatal(err)
	}
	page, err := dst.IndexList(ctx, store.Index{Type: "trigger"}, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.IndexEntry{{ID: "h1", Score: 1700000000500}}, page.Entries); diff != "" {
		t.Errorf("trigger index (-want +got):\n%s", diff)
	}
}
