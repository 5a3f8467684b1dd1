// Package subq is the event queue of one live store subscription: bounded
// like a buffered channel, but holding memory only for the events actually
// waiting, since most subscriptions (an idle SSE stream's, say) hold none
// for most of their life.
package subq

import (
	"sync"

	"github.com/nqd-dev/nqd/event"
)

// keep is the largest backing array an emptied queue keeps for the next
// events; a burst's larger one is let go.
const keep = 8

// Queue is a FIFO of at most bound events with a one-slot ready signal. It
// is safe for one reader and many writers.
type Queue struct {
	bound int
	ready chan struct{}

	mu    sync.Mutex
	items []event.Event // items[head:] are waiting
	head  int
	ended bool
}

// New returns an empty queue that holds at most bound events (at least 1).
func New(bound int) *Queue {
	return &Queue{bound: max(bound, 1), ready: make(chan struct{}, 1)}
}

// Bound is the most events the queue holds.
func (q *Queue) Bound() int { return q.bound }

// Push appends e and reports whether it fit: false means bound events are
// waiting already, and the caller ends the subscription. After End, e is
// dropped.
func (q *Queue) Push(e event.Event) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ended {
		return true
	}
	if len(q.items)-q.head >= q.bound {
		return false
	}
	if q.head > 0 && len(q.items) == cap(q.items) {
		// Reuse the taken front before growing.
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items = q.items[:n]
		q.head = 0
	}
	q.items = append(q.items, e)
	q.signal()
	return true
}

// End marks the queue ended: the events waiting are still taken, then Next
// reports the end. Only the first call counts.
func (q *Queue) End() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.ended {
		q.ended = true
		q.signal()
	}
}

// signal wakes the reader; a pending wake covers this one. q.mu is held.
func (q *Queue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// Ready receives after events arrive or the queue ends; one receive may
// stand for many, so the reader takes with Next until it says to wait.
func (q *Queue) Ready() <-chan struct{} { return q.ready }

// Next takes the oldest waiting event (ok). When none is waiting, live says
// whether more may come (wait on Ready) or the queue has ended.
func (q *Queue) Next() (e event.Event, ok, live bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.items) {
		return event.Event{}, false, !q.ended
	}
	e = q.items[q.head]
	q.items[q.head] = event.Event{}
	q.head++
	if q.head == len(q.items) {
		q.head = 0
		if cap(q.items) > keep {
			q.items = nil
		} else {
			q.items = q.items[:0]
		}
	}
	return e, true, true
}

// Len is the number of events waiting.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) - q.head
}
