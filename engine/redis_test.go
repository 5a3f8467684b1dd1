package engine_test

import (
	"testing"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store/redisstore"
)

func init() { backends["redis"] = newRedisStore }

// newRedisStore is a Redis store under a key prefix of the test's own, on a
// client of its own, as a second nqd instance would have.
func newRedisStore(t *testing.T) engine.Store {
	t.Helper()
	return newRedisStoreAt(t, redistest.Prefix(t))
}

func newRedisStoreAt(t *testing.T, prefix string) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(redistest.Client(t), redisstore.Options{Prefix: prefix, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
