package boltstore

import (
	"context"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

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
	sub, err := s.subs.Add(string(contextKey(c)), buffer)
	if err != nil {
		return nil, err
	}
	sub.Watch(ctx)
	return sub, nil
}

// publish hands evs, just committed to context ck, to its subscribers
// without ever waiting for one.
func (s *Store) publish(ck string, evs []event.Event) { s.subs.Publish(ck, evs) }
