package subq_test

import (
	"slices"
	"testing"
	"testing/synctest"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store/internal/subq"
)

func ev(n uint64) event.Event { return event.Event{ID: event.ID{MS: 1, Seq: n}} }

// takeAll takes every waiting event and reports whether the queue is live.
func takeAll(q *subq.Queue) (got []uint64, live bool) {
	for {
		e, ok, live := q.Next()
		if !ok {
			return got, live
		}
		got = append(got, e.ID.Seq)
	}
}

func TestBoundOrderAndOverflow(t *testing.T) {
	q := subq.New(3)
	for n := range uint64(3) {
		if !q.Push(ev(n)) {
			t.Fatalf("Push %d of a bound of 3 refused", n+1)
		}
	}
	if q.Push(ev(3)) {
		t.Fatal("a fourth Push fit a bound of 3")
	}
	if q.Len() != 3 {
		t.Fatalf("Len = %d after an overflow, want the 3 that fit", q.Len())
	}
	// Taking one makes room for exactly one more.
	if e, ok, _ := q.Next(); !ok || e.ID.Seq != 0 {
		t.Fatalf("Next = %v, %v; want event 0", e.ID, ok)
	}
	if !q.Push(ev(3)) || q.Push(ev(4)) {
		t.Fatal("after one Next, want room for one event and no more")
	}
	got, live := takeAll(q)
	if want := []uint64{1, 2, 3}; !slices.Equal(got, want) || !live {
		t.Fatalf("took %v (live %v), want %v, live", got, live, want)
	}
}

// The queue refills after it emptied, many times over, in order; a burst
// up to the bound behaves like the first.
func TestRefillKeepsOrder(t *testing.T) {
	q := subq.New(256)
	var next uint64
	var want []uint64
	for round := range 50 {
		for range round % 7 * 40 {
			fit := q.Push(ev(next))
			if fit != (len(want) < 256) {
				t.Fatalf("round %d: Push with %d waiting = %v", round, len(want), fit)
			}
			if fit {
				want = append(want, next)
				next++
			}
		}
		// Take only some, so the front and the back both move.
		for range round % 5 * 30 {
			if e, ok, _ := q.Next(); ok {
				if e.ID.Seq != want[0] {
					t.Fatalf("round %d: took %d, want %d", round, e.ID.Seq, want[0])
				}
				want = want[1:]
			}
		}
	}
	got, _ := takeAll(q)
	if !slices.Equal(got, want) {
		t.Fatalf("left %d events %v, want %d", len(got), got, len(want))
	}
}

func TestEndLetsWaitingEventsBeTakenFirst(t *testing.T) {
	q := subq.New(4)
	q.Push(ev(1))
	q.Push(ev(2))
	q.End()
	q.End()
	if !q.Push(ev(3)) {
		t.Error("Push after End reported an overflow, want the event dropped")
	}
	got, live := takeAll(q)
	if want := []uint64{1, 2}; !slices.Equal(got, want) || live {
		t.Fatalf("took %v (live %v), want %v then the end", got, live, want)
	}
}

// A reader parked on Ready wakes for a push and for the end, and a signal is
// never lost between its Next and its wait.
func TestReaderWakesForEveryPushAndTheEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := subq.New(1000)
		const total = 500
		var got []uint64
		done := make(chan bool)
		go func() {
			for {
				e, ok, live := q.Next()
				if ok {
					got = append(got, e.ID.Seq)
					continue
				}
				if !live {
					done <- true
					return
				}
				<-q.Ready()
			}
		}()
		for n := range uint64(total) {
			q.Push(ev(n))
		}
		synctest.Wait() // the reader has taken everything and waits on Ready
		if len(got) != total {
			t.Fatalf("reader took %d of %d events before waiting", len(got), total)
		}
		q.End()
		<-done
		for i, n := range got {
			if n != uint64(i) {
				t.Fatalf("event %d is %d: out of order", i, n)
			}
		}
	})
}
