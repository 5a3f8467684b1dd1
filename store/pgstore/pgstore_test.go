package pgstore_test

import (
	"testing"

	"github.com/nqd-dev/nqd/internal/pgtest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/pgstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

// openTestStore opens a Store on url, closed when the test ends.
func openTestStore(t testing.TB, url string, opts pgstore.Options) *pgstore.Store {
	t.Helper()
	opts.Logger = testkit.Logger(t)
	s, err := pgstore.Open(t.Context(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newTestStore returns a Store in a schema of its own on the shared test
// server.
func newTestStore(t testing.TB, opts pgstore.Options) *pgstore.Store {
	t.Helper()
	return openTestStore(t, pgtest.URL(t), opts)
}

func TestConformance(t *testing.T) {
	storetest.RunAll(t, func(t *testing.T, opts storetest.Options) storetest.Harness {
		url := pgtest.URL(t)
		// The database clock cannot be moved, so the suite waits for expiry.
		return storetest.Harness{
			Store: openTestStore(t, url, pgstore.Options{Retention: opts.Retention}),
			Reopen: func() store.Backend {
				// A second instance on the same schema.
				return openTestStore(t, url, pgstore.Options{Retention: opts.Retention})
			},
		}
	})
}

func BenchmarkStore(b *testing.B) {
	storetest.RunBenchmarks(b, func(b *testing.B) store.Store { return newTestStore(b, pgstore.Options{}) })
}

func BenchmarkKV(b *testing.B) {
	storetest.RunKVBenchmarks(b, func(b *testing.B) store.KV { return newTestStore(b, pgstore.Options{}) })
}
