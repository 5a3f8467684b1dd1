// Package backendtest opens nqd's store backends for tests: the embedded
// store in a temporary directory, Redis on the test binary's throwaway
// server or cluster (internal/redistest) under a key prefix of the test's
// own, and PostgreSQL in a schema of the test's own (internal/pgtest). Each
// runs a test once per backend with a fresh store.
package backendtest

import (
	"os"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/internal/pgtest"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
	"github.com/nqd-dev/nqd/store/pgstore"
	"github.com/nqd-dev/nqd/store/redisstore"
)

// The backends by name, as subtests are named.
const (
	Embedded = "bolt"
	Redis    = "redis"
	Postgres = "postgres"
	// RedisCluster is Redis on a cluster of three primaries with a replica
	// each, for the tests of what a cluster changes (sharded Pub/Sub, a
	// prefix's hash slot); the others leave it out for its cost.
	RedisCluster = "redis-cluster"
	// RedisShards and RedisClusterShards are Redis and RedisCluster with
	// the keys split over shards (NQ_REDIS_SHARDS): 4 on the one server, 9
	// on the cluster, each shard its own hash slot there.
	RedisShards        = "redis-shards"
	RedisClusterShards = "redis-cluster-shards"
)

// All names every backend but the Redis Cluster and the sharded ones.
var All = []string{Embedded, Redis, Postgres}

// Backend opens stores of one backend for one test.
type Backend struct {
	Name string
	// Open opens a store. The stores one Backend opens share their data,
	// as nqd instances on one backend do: on Redis they use one key prefix
	// over clients of their own, on PostgreSQL one schema over pools of
	// their own; the embedded store, which one process owns, is the same
	// store each time.
	Open func(t testing.TB) store.Backend
	// Args are the flags that run nqd on this backend: on Redis and
	// PostgreSQL on the data Open's stores share, on the embedded store in
	// a directory of its own (one process owns an embedded store).
	Args func(t testing.TB) []string
}

// Each runs f in a subtest per backend named (Embedded, Redis, Postgres,
// RedisCluster), each with a Backend of its own. Without a Redis or
// PostgreSQL server on the machine those subtests are skipped, as redistest
// and pgtest skip.
func Each(t *testing.T, names []string, f func(t *testing.T, b Backend)) {
	for _, name := range names {
		t.Run(name, func(t *testing.T) { f(t, Named(t, name)) })
	}
}

// Named is the Backend of that name for t, as Each gives it to a subtest:
// for a benchmark, or a test of one backend.
func Named(t testing.TB, name string) Backend {
	t.Helper()
	switch name {
	case Embedded:
		var st *boltstore.Store
		return Backend{Name: name, Open: func(t testing.TB) store.Backend {
			if st == nil {
				st = bolttest.Open(t, boltstore.Options{Logger: testkit.Logger(t)})
			}
			return st
		}, Args: func(t testing.TB) []string { return []string{"-data-dir", t.TempDir()} }}
	case Redis, RedisShards:
		prefix, url := redistest.Prefix(t), "redis://"+redistest.Addr(t)
		// NQD_TEST_REDIS_SHARDS runs the tests on a store of several shards.
		shards, _ := strconv.Atoi(os.Getenv("NQD_TEST_REDIS_SHARDS"))
		if shards = max(shards, 1); name == RedisShards {
			shards = 4
		}
		return Backend{Name: name, Open: func(t testing.TB) store.Backend { return openRedis(t, redistest.Client(t), prefix, shards) },
			Args: func(testing.TB) []string { return redisArgs(url, prefix, shards) }}
	case RedisCluster, RedisClusterShards:
		prefix, url, shards := redistest.ClusterPrefix(t), redistest.ClusterURL(t), 1
		if name == RedisClusterShards {
			shards = 9
		}
		return Backend{Name: name, Open: func(t testing.TB) store.Backend { return openRedis(t, redistest.ClusterClient(t), prefix, shards) },
			Args: func(testing.TB) []string { return redisArgs(url, prefix, shards) }}
	case Postgres:
		url := pgtest.URL(t)
		return Backend{Name: name, Open: func(t testing.TB) store.Backend { return OpenPostgres(t, url) },
			Args: func(testing.TB) []string { return []string{"-postgres-url", url} }}
	}
	t.Fatalf("backendtest: no backend %q", name)
	return Backend{}
}

// OpenRedis opens a Redis store of one shard on its own client of the test
// binary's server, under prefix (one of the test's own when empty), closed
// when the test ends.
func OpenRedis(t testing.TB, prefix string) *redisstore.Store {
	t.Helper()
	if prefix == "" {
		prefix = redistest.Prefix(t)
	}
	return openRedis(t, redistest.Client(t), prefix, 1)
}

// OpenRedisCluster opens a Redis store on its own client of the test
// binary's cluster, under prefix (one of the test's own when empty), closed
// when the test ends.
func OpenRedisCluster(t testing.TB, prefix string) *redisstore.Store {
	t.Helper()
	if prefix == "" {
		prefix = redistest.ClusterPrefix(t)
	}
	return openRedis(t, redistest.ClusterClient(t), prefix, 1)
}

func openRedis(t testing.TB, client redis.UniversalClient, prefix string, shards int) *redisstore.Store {
	t.Helper()
	st, err := redisstore.New(client, redisstore.Options{Prefix: prefix, Shards: shards, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatalf("open the Redis store: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close the Redis store: %v", err)
		}
	})
	return st
}

func redisArgs(url, prefix string, shards int) []string {
	return []string{"-redis-url", url, "-prefix", prefix, "-redis-shards", strconv.Itoa(shards)}
}

// OpenPostgres opens a PostgreSQL store on url (a schema of the test's own
// when empty), closed when the test ends.
func OpenPostgres(t testing.TB, url string) *pgstore.Store {
	t.Helper()
	if url == "" {
		url = pgtest.URL(t)
	}
	st, err := pgstore.Open(t.Context(), url, pgstore.Options{Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatalf("open the PostgreSQL store: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close the PostgreSQL store: %v", err)
		}
	})
	return st
}
