package metrics

import (
	"context"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Store wraps a store so that its appends are measured: their duration (the
// store's leg of an append, the Redis round trip on Redis) and their
// results. The events they write are counted by the store itself (see
// EventsAppended), with every other write. Every other method passes
// through.
//
// The wrapper is a store.Store and nothing more: give it to the code whose
// appends are to be measured (the HTTP API), and keep the unwrapped store
// where a backend's own methods are wanted.
func (m *Metrics) Store(st store.Store) store.Store { return &measuredStore{Store: st, m: m} }

type measuredStore struct {
	store.Store
	m *Metrics
}

var _ store.Store = (*measuredStore)(nil)

func (s *measuredStore) Append(ctx context.Context, c store.Context, evs []event.Event, opts store.AppendOptions) (store.AppendResult, error) {
	start := time.Now()
	res, err := s.Store.Append(ctx, c, evs, opts)
	s.m.appendDuration.WithLabelValues("store").Observe(time.Since(start).Seconds())
	switch {
	case err != nil:
		s.m.appends.WithLabelValues("error").Inc()
	case res.Replayed:
		s.m.appends.WithLabelValues("replayed").Inc()
	default:
		s.m.appends.WithLabelValues("ok").Inc()
	}
	return res, err
}
