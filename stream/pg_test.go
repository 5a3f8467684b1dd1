package stream

import (
	"testing"

	"github.com/nqd-dev/nqd/internal/pgtest"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/pgstore"
)

func init() {
	backends = append(backends, backend{name: "postgres", open: func(t *testing.T) store.Store {
		s, err := pgstore.Open(t.Context(), pgtest.URL(t), pgstore.Options{Logger: testLogger(t)})
		if err != nil {
			t.Fatalf("postgres store: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}})
}
