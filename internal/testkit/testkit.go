// Package testkit holds what tests across nqd's packages would otherwise each
// rebuild: a clock moved by hand, a logger that writes into the test's
// output, a run's events of some kinds, and an HTTP server on in-memory
// pipes. It imports nothing of nqd above package store, so the tests of
// every store can use it (store/boltstore/bolttest opens an embedded store).
package testkit

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Logger writes into t's output, so a failing test shows what nqd logged
// and a passing one stays quiet.
func Logger(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t))
}

// Clock is a clock that moves only when a test moves it. Its Now fits every
// Now option in nqd; it is safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock starts a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t, backwards too.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Ranger reads a context's stream, as every store does.
type Ranger interface {
	Range(ctx context.Context, c store.Context, q store.RangeQuery) ([]event.Event, error)
}

// RangeKinds reads c's events of the given kinds, oldest first: what a test
// looks for among the events a run wrote.
func RangeKinds(ctx context.Context, st Ranger, c store.Context, kinds ...string) ([]event.Event, error) {
	evs, err := st.Range(ctx, c, store.RangeQuery{})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(evs, func(e event.Event) bool { return !slices.Contains(kinds, e.Kind) }), nil
}
