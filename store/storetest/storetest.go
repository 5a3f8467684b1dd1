// Package storetest is the conformance suite every nqd backend must pass. A
// backend's test calls RunAll once with a constructor that gives each
// scenario a fresh, isolated store, and RunBenchmarks to measure the same
// operations.
//
// The suite assumes the store's clock is the wall clock of the test machine
// (within a few seconds), since event times come from the store.
package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// waitTimeout bounds every wait on a channel or a goroutine, so a broken
// backend fails the scenario instead of hanging the test binary. Every wait
// is for something that must happen, so the bound is generous: a thousand
// appends serialized on one context's lock took over 10 s on PostgreSQL on
// a loaded two-core machine, and a slow run must not read as a hang.
const waitTimeout = 60 * time.Second

// clockSlack is how far a store's clock may drift from the test's clock.
const clockSlack = 5 * time.Second

// scenario is one named conformance check.
type scenario struct {
	name string
	run  func(t *testing.T, s store.Store)
}

var scenarios = []scenario{
	{"AppendOrderAndIDs", testAppendOrderAndIDs},
	{"TimeFromID", testTimeFromID},
	{"RoundTripAllFields", testRoundTrip},
	{"BatchAllOrNothing", testBatchAllOrNothing},
	{"EmptyBatchInvalid", testEmptyBatch},
	{"Idempotency", testIdempotency},
	{"IdempotencyScopedToContext", testIdempotencyScoped},
	{"IdempotencyKeyReused", testIdempotencyKeyReused},
	{"ConcurrentWriters", testConcurrentWriters},
	{"SubscribeSeesLaterAppends", testSubscribeSeesAppends},
	{"TwoSubscribers", testTwoSubscribers},
	{"SubscriptionsAreScopedToContext", testSubscriptionScoped},
	{"SubscriptionClose", testSubscriptionClose},
	{"SubscriptionContextCancel", testSubscriptionContextCancel},
	{"StoreCloseEndsSubscriptions", testStoreCloseEndsSubscriptions},
	{"OverflowDropsOnlySlowSubscriber", testOverflow},
	{"IndexOnFirstEvent", testIndexFirstEvent},
	{"IndexFlowStarted", testIndexFlowStarted},
	{"IndexTriggerRegistered", testIndexTriggerRegistered},
	{"IndexAddKeepsFirstScore", testIndexAddKeepsFirstScore},
	{"IndexListPaging", testIndexListPaging},
	{"IndexListEmpty", testIndexListEmpty},
	{"RangeBounds", testRangeBounds},
	{"RangeThroughTime", testRangeThroughTime},
	{"RangeReverseLimit", testRangeReverseLimit},
	{"RangeEmptyContext", testRangeEmpty},
	{"Info", testInfo},
	{"InvalidContext", testInvalidContext},
	{"InvalidIndex", testInvalidIndex},
	{"Ping", testPing},
}

// runStore runs every store.Store scenario as a parallel subtest, each on a
// store of its own from newStore.
func runStore(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.run(t, newStore(t))
		})
	}
}

var invalidContexts = []store.Context{
	{Type: "a:b", ID: "x"},
	{Type: "", ID: "x"},
	{Type: "Flow", ID: "x"},
	{Type: "flow", ID: "*"},
	{Type: "flow", ID: "list"},
	{Type: "flow", ID: ""},
	{Type: "flow", ID: "a:b"},
	{Type: "flow", ID: "a b"},
	{Type: "flow", ID: "{x}"},
	{Type: "flow", ID: strings.Repeat("a", 200)},
	{Type: strings.Repeat("a", 40), ID: "x"},
}

func testInvalidContext(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, c := range invalidContexts {
		if _, err := s.Append(ctx, c, []event.Event{{Kind: "log"}}, store.AppendOptions{}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Append(%q) = %v, want ErrInvalid", c, err)
		}
		if _, err := s.Range(ctx, c, store.RangeQuery{}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Range(%q) = %v, want ErrInvalid", c, err)
		}
		if _, err := s.Info(ctx, c); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Info(%q) = %v, want ErrInvalid", c, err)
		}
		sub, err := s.Subscribe(ctx, c, 1)
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Subscribe(%q) = %v, want ErrInvalid", c, err)
		}
		if sub != nil {
			sub.Close()
		}
	}
}

func testInvalidIndex(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, ix := range []store.Index{
		{Type: "a:b"},
		{Type: ""},
		{Type: "Flow"},
		{Type: "flow", Name: "*"},
		{Type: "flow", Name: "a:b"},
		{Type: "flow", Name: "a b"},
		{Type: "flow", Name: strings.Repeat("n", 200)},
	} {
		if err := s.IndexAdd(ctx, ix, "x", 1); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("IndexAdd(%+v) = %v, want ErrInvalid", ix, err)
		}
		if _, err := s.IndexList(ctx, ix, 0, 10); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("IndexList(%+v) = %v, want ErrInvalid", ix, err)
		}
	}
}

func testPing(t *testing.T, s store.Store) {
	if err := s.Ping(t.Context()); err != nil {
		t.Errorf("Ping = %v, want nil", err)
	}
}
