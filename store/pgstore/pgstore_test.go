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
