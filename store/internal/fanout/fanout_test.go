package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/internal/fanout"
)

var errClosed = fmt.Errorf("test store: %w", store.ErrClosed)

func ev(seq uint64) event.Event { return event.Event{ID: event.ID{MS: 1, Seq: seq}, Kind: "log"} }

func TestPublishOverflowEndsOnlyTheFullSubscription(t *testing.T) {
	s := fanout.NewSet(zerolog.Nop(), errClosed)
	slow, err := s.Add("flow:a", 1)
	if err != nil {
		t.Fatal(err)
	}
	fast, _ := s.Add("flow:a", 8)
	other, _ := s.Add("flow:b", 8)

	s.Publish("flow:a", []event.Event{ev(1), ev(2)})

	if !errors.Is(slow.Err(), store.ErrOverflow) {
		t.Errorf("slow subscription: Err = %v, want ErrOverflow", slow.Err())
	}
	if got := drain(slow); len(got) != 1 || got[0] != ev(1).ID {
		t.Errorf("slow subscription got %v before it ended, want the one event its buffer held", got)
	}
	if fast.Err() != nil || fast.Len() != 2 {
		t.Errorf("fast subscription: Err = %v, %d queued; want live with 2", fast.Err(), fast.Len())
	}
	if other.Len() != 0 {
		t.Errorf("another context's subscription got %d events", other.Len())
	}
	// The ended subscription is gone from the set: a later publish reaches
	// only the live one.
	s.Publish("flow:a", []event.Event{ev(3)})
	if fast.Len() != 3 {
		t.Errorf("fast subscription has %d queued after a second publish, want 3", fast.Len())
	}
}

func TestCloseEndsEverySubscriptionAndRefusesNew(t *testing.T) {
	s := fanout.NewSet(zerolog.Nop(), errClosed)
	a, _ := s.Add("flow:a", 4)
	b, _ := s.Add("flow:b", 4)
	s.Close()
	for _, sub := range []*fanout.Sub{a, b} {
		if !errors.Is(sub.Err(), store.ErrClosed) {
			t.Errorf("%s: Err after Close = %v, want ErrClosed", sub.Key(), sub.Err())
		}
		if _, _, live := sub.Next(); live {
			t.Errorf("%s: still live after Close", sub.Key())
		}
	}
	if _, err := s.Add("flow:a", 4); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Add after Close = %v, want ErrClosed", err)
	}
}

func TestWatchEndsWithTheContext(t *testing.T) {
	s := fanout.NewSet(zerolog.Nop(), errClosed)
	sub, _ := s.Add("flow:a", 4)
	ctx, cancel := context.WithCancel(t.Context())
	sub.Watch(ctx)
	cancel()
	select {
	case <-sub.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription did not end within 10s of its context")
	}
	if !errors.Is(sub.Err(), context.Canceled) {
		t.Errorf("Err = %v, want context.Canceled", sub.Err())
	}

	// A context already done ends the subscription too.
	done, _ := s.Add("flow:a", 4)
	done.Watch(ctx)
	select {
	case <-done.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a subscription watching a done context did not end within 10s")
	}
}

func TestWakesMerge(t *testing.T) {
	s := fanout.NewSet(zerolog.Nop(), errClosed)
	a, _ := s.Add("flow:a", 4)
	b, _ := s.Add("flow:b", 4)
	s.Wake("flow:a")
	s.Wake("flow:a")
	select {
	case <-a.Woken():
	default:
		t.Fatal("flow:a was not woken")
	}
	select {
	case <-a.Woken():
		t.Error("two wakes before a read were delivered twice")
	default:
	}
	select {
	case <-b.Woken():
		t.Error("waking flow:a woke flow:b")
	default:
	}
	s.Wake("")
	select {
	case <-b.Woken():
	default:
		t.Error("waking every subscription missed flow:b")
	}
}

func drain(sub *fanout.Sub) []event.ID {
	var out []event.ID
	for {
		e, ok, _ := sub.Next()
		if !ok {
			break
		}
		out = append(out, e.ID)
	}
	return out
}
