package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/store"
)

func testSubscribeSeesAppends(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-live"}
	mustAppend(t, s, c, evs(c, "step.started", 0, 2))
	sub := mustSubscribe(t, s, c, 100)
	var want []event.Event
	for i := range 5 {
		want = append(want, mustAppend(t, s, c, evs(c, "step.completed", 10*i, 3))...)
	}
	diffEvents(t, "live events", want, receive(t, sub, len(want)))
	if err := sub.Err(); err != nil {
		t.Errorf("Err of a live subscription = %v, want nil", err)
	}
}

func testTwoSubscribers(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-two"}
	a := mustSubscribe(t, s, c, 100)
	b := mustSubscribe(t, s, c, 100)
	var want []event.Event
	for i := range 4 {
		want = append(want, mustAppend(t, s, c, evs(c, "log", 2*i, 2))...)
	}
	diffEvents(t, "subscriber a", want, receive(t, a, len(want)))
	diffEvents(t, "subscriber b", want, receive(t, b, len(want)))
}

func testSubscriptionScoped(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-mine"}
	other := store.Context{Type: "flow", ID: "run-other"}
	sameID := store.Context{Type: "trigger", ID: "run-mine"}
	sub := mustSubscribe(t, s, c, 100)
	mustAppend(t, s, other, evs(other, "log", 0, 2))
	mustAppend(t, s, sameID, evs(sameID, "log", 0, 2))
	// Delivery is in order, so once c's own event arrives anything misrouted
	// would have arrived before it.
	want := mustAppend(t, s, c, evs(c, "log", 5, 1))
	diffEvents(t, "events of the subscribed context", want, receive(t, sub, 1))
}

func testSubscriptionClose(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-unsub"}
	sub := mustSubscribe(t, s, c, 10)
	stay := mustSubscribe(t, s, c, 10)
	sub.Close()
	drainUntilEnd(t, sub)
	if err := sub.Err(); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Err after Close = %v, want ErrClosed", err)
	}
	sub.Close() // a second Close is harmless

	want := mustAppend(t, s, c, evs(c, "log", 0, 2))
	diffEvents(t, "remaining subscriber", want, receive(t, stay, 2))
}

func testSubscriptionContextCancel(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-cancel"}
	ctx, cancel := context.WithCancel(t.Context())
	sub, err := s.Subscribe(ctx, c, 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	cancel()
	drainUntilEnd(t, sub)
	if err := sub.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("Err after the context was cancelled = %v, want context.Canceled", err)
	}
}

func testStoreCloseEndsSubscriptions(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-close"}
	subs := []store.Subscription{mustSubscribe(t, s, c, 10), mustSubscribe(t, s, c, 10)}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, sub := range subs {
		drainUntilEnd(t, sub)
		if err := sub.Err(); !errors.Is(err, store.ErrClosed) {
			t.Errorf("subscription %d: Err after store Close = %v, want ErrClosed", i, err)
		}
	}
	if _, err := s.Subscribe(t.Context(), c, 10); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Subscribe after Close = %v, want ErrClosed", err)
	}
}

func testOverflow(t *testing.T, s store.Store) {
	const slowBuffer, total = 4, 40
	c := store.Context{Type: "flow", ID: "run-slow"}
	slow := mustSubscribe(t, s, c, slowBuffer)
	fast := mustSubscribe(t, s, c, total)

	// The writer must never wait for the slow subscriber, so all appends
	// finish while nobody reads.
	appended := make(chan []event.Event, 1)
	go func() {
		var all []event.Event
		for i := range total {
			res, err := s.Append(context.Background(), c, []event.Event{ev(c, "log", i)}, store.AppendOptions{})
			if err != nil {
				t.Errorf("append %d: %v", i, err)
				break
			}
			all = append(all, res.Events...)
		}
		appended <- all
	}()
	var want []event.Event
	select {
	case want = <-appended:
	case <-time.After(waitTimeout):
		t.Fatal("appends blocked behind a subscriber that does not read")
	}
	if len(want) != total {
		t.FailNow()
	}

	diffEvents(t, "fast subscriber", want, receive(t, fast, total))

	// A store may deliver after the append returns (PostgreSQL reads the new
	// events when notified), so the slow subscriber overflows once its feed
	// catches up; reading it before then would make room and hide that.
	wait.For(t, waitTimeout, 5*time.Millisecond, "the slow subscriber overflowed", func() bool { return slow.Err() != nil })
	got := drainUntilEnd(t, slow)
	if err := slow.Err(); !errors.Is(err, store.ErrOverflow) {
		t.Errorf("slow subscriber: Err = %v, want ErrOverflow", err)
	}
	if len(got) > slowBuffer {
		t.Errorf("slow subscriber received %d events, more than its buffer of %d", len(got), slowBuffer)
	}
	// What it did receive is the head of the stream, in order: it resumes
	// with Range after its last id.
	diffEvents(t, "slow subscriber's events", want[:len(got)], got)
}
