package boltstore

import (
	"context"
	"sync"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// subscription is a bounded in-process feed of one context's events.
type subscription struct {
	s   *Store
	ck  string
	ch  chan event.Event
	mu  sync.Mutex
	err error // set once, when the subscription ends
	// stop detaches the context watcher.
	stop func() bool
}

// Subscribe delivers c's events appended after it returns. buffer <= 0 uses
// Options.SubscriptionBuffer. Errors: ErrInvalid, ErrClosed, or ctx's error.
func (s *Store) Subscribe(ctx context.Context, c store.Context, buffer int) (store.Subscription, error) {
	if err := checkContext(c); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if buffer <= 0 {
		buffer = s.opts.SubscriptionBuffer
	}
	sub := &subscription{s: s, ck: string(contextKey(c)), ch: make(chan event.Event, buffer)}

	s.subsMu.Lock()
	if s.closed {
		s.subsMu.Unlock()
		return nil, errClosed
	}
	set := s.subs[sub.ck]
	if set == nil {
		set = make(map[*subscription]struct{})
		s.subs[sub.ck] = set
	}
	set[sub] = struct{}{}
	s.subsMu.Unlock()

	// Held so that a context already done cannot end the subscription
	// before stop is recorded.
	sub.mu.Lock()
	stop := context.AfterFunc(ctx, func() { sub.end(ctx.Err()) })
	sub.stop = stop
	ended := sub.err != nil
	sub.mu.Unlock()
	if ended {
		// A concurrent store Close got here first; don't leave the watcher.
		stop()
	}
	return sub, nil
}

// publish hands evs to c's subscribers without ever waiting for one: a full
// channel ends that subscriber with ErrOverflow.
func (s *Store) publish(ck string, evs []event.Event) {
	s.subsMu.Lock()
	set := s.subs[ck]
	if len(set) == 0 {
		s.subsMu.Unlock()
		return
	}
	subs := make([]*subscription, 0, len(set))
	for sub := range set {
		subs = append(subs, sub)
	}
	s.subsMu.Unlock()

	for _, sub := range subs {
		for _, e := range evs {
			if !sub.send(e) {
				break
			}
		}
	}
}

func (s *Store) unsubscribe(sub *subscription) {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	if set := s.subs[sub.ck]; set != nil {
		delete(set, sub)
		if len(set) == 0 {
			delete(s.subs, sub.ck)
		}
	}
}

// send reports whether e was queued; false means the subscription has ended.
func (sub *subscription) send(e event.Event) bool {
	sub.mu.Lock()
	if sub.err != nil {
		sub.mu.Unlock()
		return false
	}
	select {
	case sub.ch <- e:
		sub.mu.Unlock()
		return true
	default:
	}
	sub.mu.Unlock()
	sub.s.log.Debug().Str("context", sub.ck).Int("buffer", cap(sub.ch)).Msg("subscriber overflow")
	sub.end(store.ErrOverflow)
	return false
}

// end closes the channel and records why; only the first call counts.
func (sub *subscription) end(err error) {
	sub.mu.Lock()
	if sub.err != nil {
		sub.mu.Unlock()
		return
	}
	sub.err = err
	close(sub.ch)
	stop := sub.stop
	sub.mu.Unlock()
	if stop != nil {
		stop()
	}
	sub.s.unsubscribe(sub)
}

// C returns the channel of events; it is closed when the subscription ends.
func (sub *subscription) C() <-chan event.Event { return sub.ch }

// Err says why the subscription ended, or nil while it is live.
func (sub *subscription) Err() error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.err
}

// Close ends the subscription with ErrClosed.
func (sub *subscription) Close() { sub.end(errClosed) }
