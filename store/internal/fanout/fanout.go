// Package fanout is the in-process side of live subscriptions that the
// embedded and PostgreSQL stores share: the subscriptions of a store by
// context, each a bounded queue that a slow reader overflows instead of
// holding up the writer. The embedded store hands each subscription its
// appended events (Publish); the PostgreSQL store wakes each one to read
// them from its table (Wake).
package fanout

import (
	"context"
	"sync"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/internal/subq"
)

// Set is a store's live subscriptions by context key. It is safe for
// concurrent use.
type Set struct {
	log       zerolog.Logger
	closedErr error

	mu     sync.Mutex
	subs   map[string]map[*Sub]struct{}
	closed bool
}

// NewSet returns an empty set. closedErr is what its subscriptions end with
// when they or the set are closed, the store's own wrapping of
// store.ErrClosed.
func NewSet(log zerolog.Logger, closedErr error) *Set {
	return &Set{log: log, closedErr: closedErr, subs: make(map[string]map[*Sub]struct{})}
}

// Add registers a subscription of context key that holds buffer events. Errors: the set's closedErr once it is closed.
func (s *Set) Add(key string, buffer int) (*Sub, error) {
	sub := &Sub{
		set: s, key: key, q: subq.New(buffer),
		woken: make(chan struct{}, 1), done: make(chan struct{}),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, s.closedErr
	}
	set := s.subs[key]
	if set == nil {
		set = make(map[*Sub]struct{})
		s.subs[key] = set
	}
	set[sub] = struct{}{}
	return sub, nil
}

// Publish hands evs to key's subscriptions without ever waiting for one: a
// full queue ends that subscription with store.ErrOverflow.
func (s *Set) Publish(key string, evs []event.Event) {
	for _, sub := range s.of(key) {
		for _, e := range evs {
			if !sub.Send(e) {
				break
			}
		}
	}
}

// Wake wakes key's subscriptions, or every one when key is "".
func (s *Set) Wake(key string) {
	for _, sub := range s.of(key) {
		sub.Wake()
	}
}

// Close ends every subscription with the set's closedErr; later Adds fail.
func (s *Set) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	for _, sub := range s.of("") {
		sub.End(s.closedErr)
	}
}

// of is a copy of key's subscriptions, or of all of them when key is "",
// so that they are served without holding the set's lock.
func (s *Set) of(key string) []*Sub {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Sub
	for k, set := range s.subs {
		if key != "" && k != key {
			continue
		}
		for sub := range set {
			out = append(out, sub)
		}
	}
	return out
}

func (s *Set) remove(sub *Sub) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if set := s.subs[sub.key]; set != nil {
		delete(set, sub)
		if len(set) == 0 {
			delete(s.subs, sub.key)
		}
	}
}

// Sub is one subscription, a store.Subscription.
type Sub struct {
	set   *Set
	key   string
	q     *subq.Queue
	woken chan struct{}
	done  chan struct{}

	mu   sync.Mutex
	err  error       // set once, when the subscription ends
	stop func() bool // detaches the watcher of the subscriber's context
}

var _ store.Subscription = (*Sub)(nil)

// Watch ends sub with ctx's error once ctx is done.
func (sub *Sub) Watch(ctx context.Context) {
	// Held so that a context already done cannot end the subscription
	// before stop is recorded.
	sub.mu.Lock()
	stop := context.AfterFunc(ctx, func() { sub.End(ctx.Err()) })
	sub.stop = stop
	ended := sub.err != nil
	sub.mu.Unlock()
	if ended {
		// A concurrent Close got here first; don't leave the watcher.
		stop()
	}
}

// Send reports whether e was queued; false means the subscription has
// ended. It never waits: a full queue ends the subscription with
// store.ErrOverflow.
func (sub *Sub) Send(e event.Event) bool {
	sub.mu.Lock()
	if sub.err != nil {
		sub.mu.Unlock()
		return false
	}
	if sub.q.Push(e) {
		sub.mu.Unlock()
		return true
	}
	sub.mu.Unlock()
	sub.set.log.Debug().Str("context", sub.key).Int("buffer", sub.q.Bound()).Msg("subscriber overflow")
	sub.End(store.ErrOverflow)
	return false
}

// End ends the queue and records why; only the first call counts.
func (sub *Sub) End(err error) {
	sub.mu.Lock()
	if sub.err != nil {
		sub.mu.Unlock()
		return
	}
	sub.err = err
	sub.q.End()
	close(sub.done)
	stop := sub.stop
	sub.mu.Unlock()
	if stop != nil {
		stop()
	}
	sub.set.remove(sub)
}

// Wake marks sub as having something to read; wakes that come while one is
// pending merge into it.
func (sub *Sub) Wake() {
	select {
	case sub.woken <- struct{}{}:
	default:
	}
}

// Woken receives once after one or more Wakes.
func (sub *Sub) Woken() <-chan struct{} { return sub.woken }

// Done is closed when the subscription ends.
func (sub *Sub) Done() <-chan struct{} { return sub.done }

// Key is the context key the subscription follows.
func (sub *Sub) Key() string { return sub.key }

// Ready receives after events arrive or the subscription ends.
func (sub *Sub) Ready() <-chan struct{} { return sub.q.Ready() }

// Next takes the oldest waiting event; see store.Subscription.
func (sub *Sub) Next() (e event.Event, ok, live bool) { return sub.q.Next() }

// Bound is the most events the subscription holds untaken.
func (sub *Sub) Bound() int { return sub.q.Bound() }

// Len is the number of events waiting to be taken.
func (sub *Sub) Len() int { return sub.q.Len() }

// Err says why the subscription ended, or nil while it is live.
func (sub *Sub) Err() error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.err
}

// Close ends the subscription with the set's closedErr.
func (sub *Sub) Close() { sub.End(sub.set.closedErr) }
