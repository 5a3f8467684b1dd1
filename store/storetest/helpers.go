package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// eventCmp compares events, treating JSON payloads as equal when they hold the
// same value: a backend may compact or re-encode Data and Meta.
var eventCmp = cmp.Options{
	cmp.Comparer(jsonEqual),
	cmp.Comparer(func(a, b event.ID) bool { return a == b }),
}

func jsonEqual(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return string(a) == string(b)
	}
	return cmp.Equal(va, vb)
}

// ev builds an event of kind for context c with a small payload that tells
// events apart.
func ev(c store.Context, kind string, n int) event.Event {
	return event.Event{Kind: kind, Subject: c.ID, Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
}

func evs(c store.Context, kind string, from, count int) []event.Event {
	out := make([]event.Event, count)
	for i := range out {
		out[i] = ev(c, kind, from+i)
	}
	return out
}

func mustAppend(t *testing.T, s store.Store, c store.Context, batch []event.Event) []event.Event {
	t.Helper()
	res, err := s.Append(t.Context(), c, batch, store.AppendOptions{})
	if err != nil {
		t.Fatalf("Append(%v, %d events): %v", c, len(batch), err)
	}
	if res.Replayed {
		t.Fatalf("Append(%v) without a key: Replayed = true", c)
	}
	if len(res.Events) != len(batch) {
		t.Fatalf("Append(%v): got %d events back, want %d", c, len(res.Events), len(batch))
	}
	return res.Events
}

func mustRange(t *testing.T, s store.Store, c store.Context, q store.RangeQuery) []event.Event {
	t.Helper()
	got, err := s.Range(t.Context(), c, q)
	if err != nil {
		t.Fatalf("Range(%v, %+v): %v", c, q, err)
	}
	return got
}

func mustInfo(t *testing.T, s store.Store, c store.Context) store.StreamInfo {
	t.Helper()
	info, err := s.Info(t.Context(), c)
	if err != nil {
		t.Fatalf("Info(%v): %v", c, err)
	}
	return info
}

func mustSubscribe(t *testing.T, s store.Store, c store.Context, buffer int) store.Subscription {
	t.Helper()
	sub, err := s.Subscribe(t.Context(), c, buffer)
	if err != nil {
		t.Fatalf("Subscribe(%v): %v", c, err)
	}
	t.Cleanup(sub.Close)
	return sub
}

func mustIndexList(t *testing.T, s store.Store, ix store.Index, offset, limit int) store.IndexPage {
	t.Helper()
	page, err := s.IndexList(t.Context(), ix, offset, limit)
	if err != nil {
		t.Fatalf("IndexList(%+v, %d, %d): %v", ix, offset, limit, err)
	}
	return page
}

// receive reads n events from sub, failing if they do not arrive in time or
// the subscription ends first.
func receive(t *testing.T, sub store.Subscription, n int) []event.Event {
	t.Helper()
	var got []event.Event
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for len(got) < n {
		e, err := store.Receive(ctx, sub)
		if ctx.Err() != nil {
			t.Fatalf("received %d of %d events before the deadline", len(got), n)
		}
		if err != nil {
			t.Fatalf("subscription ended after %d of %d events: %v", len(got), n, err)
		}
		got = append(got, e)
	}
	return checkPrev(t, got)
}

// checkPrev checks what a feed says of each live event's predecessor
// (event.Event.Prev, optional): got holds every event of its stream since
// the first, in order, so a Prev set on a later one is the one before it.
// It returns got without Prev, which is not part of the record.
func checkPrev(t *testing.T, got []event.Event) []event.Event {
	t.Helper()
	for i := range got {
		if i > 0 && !got[i].Prev.IsZero() && got[i].Prev != got[i-1].ID {
			t.Errorf("live event %s says it follows %s, but follows %s", got[i].ID, got[i].Prev, got[i-1].ID)
		}
		got[i].Prev = event.ID{}
	}
	return got
}

// drainUntilEnd reads sub until it ends and returns what it read.
func drainUntilEnd(t *testing.T, sub store.Subscription) []event.Event {
	t.Helper()
	var got []event.Event
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for {
		e, err := store.Receive(ctx, sub)
		if ctx.Err() != nil {
			t.Fatalf("subscription did not end before the deadline (read %d events)", len(got))
		}
		if err != nil {
			return checkPrev(t, got)
		}
		got = append(got, e)
	}
}

func ids(es []event.Event) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID.String()
	}
	return out
}

func diffEvents(t *testing.T, what string, want, got []event.Event) {
	t.Helper()
	if len(want) == 0 && len(got) == 0 {
		return // nil and empty are the same answer
	}
	if d := cmp.Diff(want, got, eventCmp); d != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", what, d)
	}
}

func waitGroup(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatal("goroutines did not finish before the deadline")
	}
}
