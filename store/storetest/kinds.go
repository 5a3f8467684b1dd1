package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// KindStore is a backend with the kind index.
type KindStore interface {
	EngineStore
	store.KindIndex
}

var kindScenarios = []struct {
	name string
	run  func(t *testing.T, s KindStore)
}{
	{"AppendsAreIndexedByKind", testKindsIndexed},
	{"UnwatchedKindsAreNotIndexed", testKindsUnwatched},
	{"WatchInvalid", testKindsWatchInvalid},
	{"RunUpdatesAreNotIndexed", testKindsSkipRunUpdates},
	{"Invalid", testKindsInvalid},
	{"ConsumeOnce", testKindsConsumeOnce},
}

// runKinds runs the kind index's conformance scenarios against fresh stores
// from newStore.
func runKinds(t *testing.T, newStore func(t *testing.T) KindStore) {
	for _, sc := range kindScenarios {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, newStore(t)) })
	}
}

func testKindsIndexed(t *testing.T, s KindStore) {
	ctx := context.Background()
	must(t, s.WatchKinds(ctx, "order.paid", "order.never"))
	must(t, s.WatchKinds(ctx, "order.paid")) // again: no-op
	a := store.Context{Type: "order", ID: "o1"}
	b := store.Context{Type: "payment", ID: "p1"}
	var want []event.Event
	var wantCtx []store.Context
	for i, c := range []store.Context{a, b, a} {
		res, err := s.Append(ctx, c, []event.Event{
			{Kind: "order.paid", Subject: c.ID, Data: []byte(`{"n":` + string(rune('0'+i)) + `}`)},
			{Kind: "order.noise", Subject: c.ID},
		}, store.AppendOptions{})
		must(t, err)
		want = append(want, res.Events[0])
		wantCtx = append(wantCtx, c)
	}
	got, err := s.KindEvents(ctx, "order.paid", event.ID{}, 1000)
	must(t, err)
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d: %+v", len(got), len(want), got)
	}
	for i, en := range got {
		if en.Context != wantCtx[i] || en.Event.ID != want[i].ID || en.Event.Kind != "order.paid" || string(en.Event.Data) != string(want[i].Data) {
			t.Errorf("entry %d = %+v in %v, want %+v in %v", i, en.Event, en.Context, want[i], wantCtx[i])
		}
		if i > 0 && en.Seq.Compare(got[i-1].Seq) <= 0 {
			t.Errorf("entry %d position %v not after %v", i, en.Seq, got[i-1].Seq)
		}
	}
	page, err := s.KindEvents(ctx, "order.paid", got[0].Seq, 1)
	must(t, err)
	if len(page) != 1 || page[0].Seq != got[1].Seq {
		t.Fatalf("page after %v = %+v, want the second entry", got[0].Seq, page)
	}
	rest, err := s.KindEvents(ctx, "order.paid", got[2].Seq, 10)
	must(t, err)
	if len(rest) != 0 {
		t.Fatalf("after the last entry: %+v", rest)
	}
	none, err := s.KindEvents(ctx, "order.never", event.ID{}, 10)
	must(t, err)
	if len(none) != 0 {
		t.Fatalf("unknown kind: %+v", none)
	}
}

// testKindsUnwatched checks that only watched kinds are indexed, and only
// from the time they are watched on.
func testKindsUnwatched(t *testing.T, s KindStore) {
	ctx := context.Background()
	c := store.Context{Type: "order", ID: "o1"}
	appendPaid := func() event.Event {
		t.Helper()
		res, err := s.Append(ctx, c, []event.Event{
			{Kind: "order.paid", Subject: c.ID},
			{Kind: "order.noise", Subject: c.ID},
		}, store.AppendOptions{})
		must(t, err)
		return res.Events[0]
	}
	appendPaid()
	got, err := s.KindEvents(ctx, "order.paid", event.ID{}, 10)
	must(t, err)
	if len(got) != 0 {
		t.Fatalf("an unwatched kind was indexed: %+v", got)
	}
	must(t, s.WatchKinds(ctx, "order.paid"))
	want := appendPaid()
	got, err = s.KindEvents(ctx, "order.paid", event.ID{}, 10)
	must(t, err)
	if len(got) != 1 || got[0].Event.ID != want.ID {
		t.Fatalf("after watching: %+v, want only %v", got, want.ID)
	}
	noise, err := s.KindEvents(ctx, "order.noise", event.ID{}, 10)
	must(t, err)
	if len(noise) != 0 {
		t.Fatalf("the unwatched kind of the batch was indexed: %+v", noise)
	}
}

func testKindsWatchInvalid(t *testing.T, s KindStore) {
	ctx := context.Background()
	if err := s.WatchKinds(ctx, "order.paid", ""); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("WatchKinds with an empty kind = %v, want ErrInvalid", err)
	}
	// A refused call watches none of its kinds.
	_, err := s.Append(ctx, store.Context{Type: "order", ID: "o1"}, []event.Event{{Kind: "order.paid", Subject: "o1"}}, store.AppendOptions{})
	must(t, err)
	got, err := s.KindEvents(ctx, "order.paid", event.ID{}, 10)
	must(t, err)
	if len(got) != 0 {
		t.Fatalf("a refused WatchKinds watched its valid kind: %+v", got)
	}
	must(t, s.WatchKinds(ctx))
}

func testKindsSkipRunUpdates(t *testing.T, s KindStore) {
	ctx := context.Background()
	must(t, s.WatchKinds(ctx, "order.paid"))
	_, err := s.UpdateRun(ctx, store.RunUpdate{
		Meta:   newRun("f", "r1", 1),
		Events: []event.Event{{Kind: "order.paid", Subject: "r1", RunID: "r1", FlowName: "f"}},
	})
	must(t, err)
	got, err := s.KindEvents(ctx, "order.paid", event.ID{}, 10)
	must(t, err)
	if len(got) != 0 {
		t.Fatalf("a run update's event was indexed: %+v", got)
	}
}

func testKindsInvalid(t *testing.T, s KindStore) {
	ctx := context.Background()
	for _, c := range []struct {
		kind  string
		limit int
	}{{"", 10}, {"ok", 0}, {"ok", 1001}} {
		if _, err := s.KindEvents(ctx, c.kind, event.ID{}, c.limit); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("KindEvents(%q, %d) = %v, want ErrInvalid", c.kind, c.limit, err)
		}
	}
}

func testKindsConsumeOnce(t *testing.T, s KindStore) {
	ctx := context.Background()
	must(t, s.WatchKinds(ctx, "order.paid"))
	_, err := s.Append(ctx, store.Context{Type: "order", ID: "o1"}, []event.Event{{Kind: "order.paid", Subject: "o1"}}, store.AppendOptions{})
	must(t, err)
	got, err := s.KindEvents(ctx, "order.paid", event.ID{}, 10)
	must(t, err)
	if len(got) != 1 || got[0].Consumed {
		t.Fatalf("entries = %+v, want one unconsumed", got)
	}
	ref := store.KindRef{Kind: "order.paid", Seq: got[0].Seq}
	var wg sync.WaitGroup
	wins := make(chan string, 8)
	for i := range 8 {
		wg.Go(func() {
			run := fmt.Sprintf("r%d", i)
			_, err := s.UpdateRun(ctx, store.RunUpdate{Meta: newRun("f", run, 1), Consume: []store.KindRef{ref},
				Events: []event.Event{{Kind: "step.resumed", Subject: run, RunID: run, FlowName: "f"}}})
			switch {
			case err == nil:
				wins <- run
			case !errors.Is(err, store.ErrConflict):
				t.Errorf("run %s: %v", run, err)
			}
		})
	}
	wg.Wait()
	close(wins)
	var winners []string
	for w := range wins {
		winners = append(winners, w)
	}
	if len(winners) != 1 {
		t.Fatalf("winners = %v, want exactly one", winners)
	}
	// A loser wrote nothing: its run does not exist.
	for i := range 8 {
		run := fmt.Sprintf("r%d", i)
		if run == winners[0] {
			continue
		}
		if _, err := s.RunMeta(ctx, "f", run); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("losing run %s: %v, want ErrNotFound", run, err)
		}
	}
	got, err = s.KindEvents(ctx, "order.paid", event.ID{}, 10)
	must(t, err)
	if !got[0].Consumed {
		t.Fatalf("entry not marked consumed: %+v", got[0])
	}
}
