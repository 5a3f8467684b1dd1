package redisstore_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/redisstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

// newTestStore returns a Store on the shared test Redis under a prefix of its
// own, closed and emptied when the test ends. NQD_TEST_REDIS_SHARDS sets the
// shards of a store whose options set none, so that the package's tests run
// on several shards too.
func newTestStore(t testing.TB, opts redisstore.Options) (*redisstore.Store, *redis.Client) {
	t.Helper()
	if n, err := strconv.Atoi(os.Getenv("NQD_TEST_REDIS_SHARDS")); err == nil && opts.Shards == 0 {
		opts.Shards = n
	}
	client := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	t.Cleanup(func() { _ = client.Close() })
	if opts.Prefix == "" {
		opts.Prefix = redistest.Prefix(t)
	}
	opts.Logger = testkit.Logger(t)
	s, err := redisstore.New(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, client
}

// TestConformance runs the suite on one shard, the layout nqd always had,
// and on four, where every scenario's contexts and runs spread over the
// shards and its reads gather them.
func TestConformance(t *testing.T) {
	for _, shards := range []int{1, 4} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			storetest.RunAll(t, func(t *testing.T, opts storetest.Options) storetest.Harness {
				prefix := redistest.Prefix(t)
				s, client := newTestStore(t, redisstore.Options{Prefix: prefix, Retention: opts.Retention, Shards: shards})
				return storetest.Harness{Store: s, Reopen: func() store.Backend {
					// A second instance on the same Redis and prefix.
					other, err := redisstore.New(client, redisstore.Options{Prefix: prefix, Retention: opts.Retention, Shards: shards, Logger: testkit.Logger(t)})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = other.Close() })
					return other
				}}
			})
		})
	}
}

func BenchmarkStore(b *testing.B) {
	storetest.RunBenchmarks(b, func(b *testing.B) store.Store {
		s, _ := newTestStore(b, redisstore.Options{})
		return s
	})
}

func BenchmarkKV(b *testing.B) {
	storetest.RunKVBenchmarks(b, func(b *testing.B) store.KV {
		s, _ := newTestStore(b, redisstore.Options{})
		return s
	})
}
