package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
)

// partlyFailing is a store whose keys are split and one part of which
// fails: claims and timer pickups answer what the rest had along with the
// part's error, and with down set the definitions cannot be read.
type partlyFailing struct {
	engine.Store
	down atomic.Bool
}

var errPart = fmt.Errorf("one part: %w", store.ErrUnavailable)

func (s *partlyFailing) Claim(ctx context.Context, queues []string, now, leaseUntil int64, lease string, max int) ([]store.Job, error) {
	jobs, err := s.Store.Claim(ctx, queues, now, leaseUntil, lease, max)
	return jobs, errors.Join(err, errPart)
}

func (s *partlyFailing) DueTimers(ctx context.Context, now, holdUntil int64, max int) ([]store.Timer, error) {
	timers, err := s.Store.DueTimers(ctx, now, holdUntil, max)
	return timers, errors.Join(err, errPart)
}

func (s *partlyFailing) Definition(ctx context.Context, name string) ([]byte, error) {
	if s.down.Load() {
		return nil, errPart
	}
	return s.Store.Definition(ctx, name)
}

// TestClaimPartlyFailed: the jobs a claim answers along with the failure of
// a part of the store are handed out (they are leased to it); a claim that
// found nothing answers the failure.
func TestClaimPartlyFailed(t *testing.T) {
	c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
	st := &partlyFailing{Store: bolttest.Open(t, boltstore.Options{})}
	e := newEngine(t, st, c)
	mustDefine(t, e, "example-flow", "example-flow")
	if _, err := e.Start(t.Context(), "example-flow", nil, ""); err != nil {
		t.Fatal(err)
	}
	jobs, err := e.Claim(t.Context(), []string{"default"}, 1, 0)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim = %v, %v; want the one job", jobs, err)
	}
	if jobs, err := e.Claim(t.Context(), []string{"default"}, 1, 0); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("claim with nothing found = %v, %v; want the part's error", jobs, err)
	}
}

// TestTickPartlyFailed: timers picked up along with the failure of a part
// of the store fire, and the tick reports the failure.
func TestTickPartlyFailed(t *testing.T) {
	c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
	inner := bolttest.Open(t, boltstore.Options{})
	st := &partlyFailing{Store: inner}
	e := newEngine(t, st, c)
	awaitFlow(t, e, "later", &flows.Await{Type: "time", Delay: time.Minute.Milliseconds()})
	s, err := e.Start(t.Context(), "later", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	runEntry(t, e)
	c.Add(time.Minute)
	if err := e.Tick(t.Context()); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("tick = %v, want the part's error", err)
	}
	if got := countKind(t, inner, store.Context{Type: "flow", ID: s.FlowID}, "step.resumed"); got != 1 {
		t.Errorf("step.resumed %d times, want 1: the timer picked up fires", got)
	}
}

// TestDefinitionWhileUnavailable: while the store cannot be read for a
// definition, the engine answers the one it read last, and the store's
// error when it read none.
func TestDefinitionWhileUnavailable(t *testing.T) {
	c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
	st := &partlyFailing{Store: bolttest.Open(t, boltstore.Options{})}
	e := newEngine(t, st, c)
	mustDefine(t, e, "example-flow", "example-flow")
	mustDefine(t, e, "unread", "example-flow")
	read, err := e.Definition(t.Context(), "example-flow")
	if err != nil {
		t.Fatal(err)
	}
	st.down.Store(true)
	if d, err := e.Definition(t.Context(), "example-flow"); err != nil || d != read {
		t.Errorf("definition while the store is down = %v, %v; want the one read before", d, err)
	}
	if _, err := e.Definition(t.Context(), "unread"); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("definition never read while the store is down: %v, want ErrUnavailable", err)
	}
}
