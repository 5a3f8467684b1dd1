package storetest

import (
	"testing"
	"time"

	"github.com/nqd-dev/nqd/store"
)

// Options say how a part of the suite needs its store opened.
type Options struct {
	// Retention is the policy for finished runs; the zero value keeps them.
	Retention store.Retention
}

// Harness is one scenario's store, with the means to move its clock and to
// open it a second time.
type Harness struct {
	Store store.Backend
	// Advance moves the store's clock forward by d. It is nil for a backend
	// on the real clock (Redis), where the suite waits instead.
	Advance func(d time.Duration)
	// Reopen returns another handle on Store's data, as a second instance
	// would open it; a backend that one process owns (the embedded store)
	// returns Store itself.
	Reopen func() store.Backend
}

// NewStore opens a store for one scenario. The store shares no data with
// any other (a fresh file, a unique key prefix) and registers its own
// cleanup with t.Cleanup, which must tolerate a second Close since some
// scenarios close the store themselves. Its clock is the wall clock until
// Advance moves it.
type NewStore func(t *testing.T, opts Options) Harness

// parts are the parts of the contract, each a list of scenarios. A new
// scenario goes in its part's list; a new part goes here, so that every
// backend runs it without a change to its tests.
var parts = []struct {
	name string
	run  func(t *testing.T, newStore NewStore)
}{
	{"Store", func(t *testing.T, newStore NewStore) {
		runStore(t, func(t *testing.T) store.Store { return newStore(t, Options{}).Store })
	}},
	{"Engine", func(t *testing.T, newStore NewStore) {
		runEngine(t, func(t *testing.T) EngineStore { return newStore(t, Options{}).Store })
	}},
	{"Checkpoints", func(t *testing.T, newStore NewStore) {
		testCheckpoints(t, newStore(t, Options{}).Store)
	}},
	{"Kinds", func(t *testing.T, newStore NewStore) {
		runKinds(t, func(t *testing.T) KindStore { return newStore(t, Options{}).Store })
	}},
	{"KV", func(t *testing.T, newStore NewStore) {
		runKV(t, func(t *testing.T) KVHarness {
			h := newStore(t, Options{})
			return KVHarness{KV: h.Store, Advance: h.Advance}
		})
	}},
	{"QueueStats", func(t *testing.T, newStore NewStore) {
		runQueueStats(t, func(t *testing.T) QueueStatsStore { return newStore(t, Options{}).Store })
	}},
	{"QueueStore", func(t *testing.T, newStore NewStore) {
		runQueueStore(t, func(t *testing.T) (s, reopen QueueStoreStore) {
			h := newStore(t, Options{})
			return h.Store, h.Reopen()
		})
	}},
	{"Restore", func(t *testing.T, newStore NewStore) {
		runRestore(t, func(t *testing.T) RestoreStore { return newStore(t, Options{}).Store })
	}},
	{"Retention", func(t *testing.T, newStore NewStore) {
		runRetention(t, func(t *testing.T) RetentionStore {
			return newStore(t, Options{Retention: RetentionPolicy}).Store
		})
	}},
	{"Trim", func(t *testing.T, newStore NewStore) {
		runTrim(t, func(t *testing.T) TrimStore { return newStore(t, Options{}).Store })
	}},
}

// RunAll runs every part of the conformance suite against stores from
// newStore. It is a backend's one entry point, so that no backend can skip a
// part by forgetting to call it.
func RunAll(t *testing.T, newStore NewStore) {
	for _, p := range parts {
		t.Run(p.name, func(t *testing.T) { p.run(t, newStore) })
	}
}
