package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// kindsStream appends ten events alternating two kinds in three batches.
func kindsStream(t *testing.T, s store.Store, c store.Context) []event.Event {
	t.Helper()
	batch := make([]event.Event, 10)
	for i := range batch {
		kind := "step.started"
		if i%2 == 1 {
			kind = "step.completed"
		}
		batch[i] = ev(c, kind, i)
	}
	var all []event.Event
	all = append(all, mustAppend(t, s, c, batch[:3])...)
	all = append(all, mustAppend(t, s, c, batch[3:4])...)
	all = append(all, mustAppend(t, s, c, batch[4:])...)
	return all
}

func reversed(es []event.Event) []event.Event {
	out := make([]event.Event, len(es))
	for i, e := range es {
		out[len(es)-1-i] = e
	}
	return out
}

func testRangeBounds(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-range"}
	all := kindsStream(t, s, c)
	for _, tc := range []struct {
		name string
		q    store.RangeQuery
		want []event.Event
	}{
		{"all", store.RangeQuery{}, all},
		{"after", store.RangeQuery{After: all[2].ID}, all[3:]},
		{"after last", store.RangeQuery{After: all[9].ID}, nil},
		{"through", store.RangeQuery{Through: all[5].ID}, all[:6]},
		{"after and through", store.RangeQuery{After: all[1].ID, Through: all[7].ID}, all[2:8]},
		{"limit", store.RangeQuery{Limit: 3}, all[:3]},
		{"after with limit", store.RangeQuery{After: all[3].ID, Limit: 2}, all[4:6]},
		{"limit above length", store.RangeQuery{Limit: 100}, all},
		{"reverse", store.RangeQuery{Reverse: true}, reversed(all)},
		{"reverse through with limit", store.RangeQuery{Reverse: true, Through: all[6].ID, Limit: 2}, reversed(all[5:7])},
		{"reverse after", store.RangeQuery{Reverse: true, After: all[7].ID}, reversed(all[8:])},
	} {
		diffEvents(t, tc.name, tc.want, mustRange(t, s, c, tc.q))
	}
}

func testRangeThroughTime(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-travel"}
	all := kindsStream(t, s, c)
	// Time travel asks "as of this instant": every event in the same
	// millisecond as the pivot is included, nothing later.
	for _, pivot := range []int{0, 4, 9} {
		at := all[pivot].Time()
		var want []event.Event
		for _, e := range all {
			if !e.Time().After(at) {
				want = append(want, e)
			}
		}
		diffEvents(t, fmt.Sprintf("through IDAt(event %d)", pivot), want, mustRange(t, s, c, store.RangeQuery{Through: event.IDAt(at)}))
	}
	if got := mustRange(t, s, c, store.RangeQuery{Through: event.IDAt(all[0].Time().Add(-time.Millisecond))}); len(got) != 0 {
		t.Errorf("through a time before the stream: got %v, want nothing", ids(got))
	}
}

func testRangeReverseLimit(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-newest"}
	all := kindsStream(t, s, c)
	for _, n := range []int{1, 3, 10, 20} {
		want := reversed(all[max(0, len(all)-n):])
		diffEvents(t, fmt.Sprintf("newest %d", n), want, mustRange(t, s, c, store.RangeQuery{Reverse: true, Limit: n}))
	}
}

func testRangeEmpty(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "never-written"}
	for _, q := range []store.RangeQuery{{}, {Reverse: true, Limit: 5}} {
		got, err := s.Range(t.Context(), c, q)
		if err != nil {
			t.Errorf("Range(%+v) of an empty context: %v", q, err)
		}
		if len(got) != 0 {
			t.Errorf("Range(%+v) of an empty context = %v, want empty", q, ids(got))
		}
	}
}

func testInfo(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-info"}
	if got := mustInfo(t, s, c); got != (store.StreamInfo{}) {
		t.Errorf("Info of an empty context = %+v, want zero", got)
	}
	all := kindsStream(t, s, c)
	want := store.StreamInfo{Length: int64(len(all)), FirstID: all[0].ID, LastID: all[len(all)-1].ID}
	if got := mustInfo(t, s, c); got != want {
		t.Errorf("Info = %+v, want %+v", got, want)
	}
}
