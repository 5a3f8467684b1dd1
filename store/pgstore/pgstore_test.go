package pgstore_test

import (
	"testing"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/internal/pgtest"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/pgstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

// newTestStore returns a Store in a schema of its own on the shared test
// server, closed when the test ends.
func newTestStore(t testing.TB, opts pgstore.Options) *pgstore.Store {
	t.Helper()
	opts.Logger = zerolog.New(zerolog.NewTestWriter(t))
	s, err := pgstore.Open(t.Context(), pgtest.URL(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return newTestStore(t, pgstore.Options{}) })
}

func TestEngineConformance(t *testing.T) {
	storetest.RunEngine(t, func(t *testing.T) storetest.EngineStore { return newTestStore(t, pgstore.Options{}) })
}

func TestKindsConformance(t *testing.T) {
	storetest.RunKinds(t, func(t *testing.T) storetest.KindStore { return newTestStore(t, pgstore.Options{}) })
}

func TestQueueStoreConformance(t *testing.T) {
	storetest.RunQueueStore(t, func(t *testing.T) (s, other storetest.QueueStoreStore) {
		url := pgtest.URL(t)
		open := func() *pgstore.Store {
			st, err := pgstore.Open(t.Context(), url, pgstore.Options{Logger: zerolog.New(zerolog.NewTestWriter(t))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		}
		// A second instance on the same schema.
		return open(), open()
	})
}

func TestQueueStatsConformance(t *testing.T) {
	storetest.RunQueueStats(t, func(t *testing.T) storetest.QueueStatsStore { return newTestStore(t, pgstore.Options{}) })
}

func TestRetentionConformance(t *testing.T) {
	storetest.RunRetention(t, func(t *testing.T) storetest.RetentionStore {
		return newTestStore(t, pgstore.Options{Retention: storetest.RetentionPolicy})
	})
}

func TestRestoreConformance(t *testing.T) {
	storetest.RunRestore(t, func(t *testing.T) storetest.RestoreStore { return newTestStore(t, pgstore.Options{}) })
}

func TestTrimConformance(t *testing.T) {
	storetest.RunTrim(t, func(t *testing.T) storetest.TrimStore { return newTestStore(t, pgstore.Options{}) })
}

func TestKVConformance(t *testing.T) {
	storetest.RunKV(t, func(t *testing.T) storetest.KVHarness {
		// The database clock cannot be moved, so the suite waits for expiry.
		return storetest.KVHarness{KV: newTestStore(t, pgstore.Options{})}
	})
}

func BenchmarkStore(b *testing.B) {
	storetest.RunBenchmarks(b, func(b *testing.B) store.Store { return newTestStore(b, pgstore.Options{}) })
}

func BenchmarkKV(b *testing.B) {
	storetest.RunKVBenchmarks(b, func(b *testing.B) store.KV { return newTestStore(b, pgstore.Options{}) })
}
