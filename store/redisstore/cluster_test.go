package redisstore_test

import (
	"testing"

	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/redisstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

// TestConformanceOnCluster runs the suite on a Redis Cluster of three
// primaries with a replica each: every scenario's prefix is a slot of its
// own, so the scenarios spread over the primaries.
func TestConformanceOnCluster(t *testing.T) {
	storetest.RunAll(t, func(t *testing.T, opts storetest.Options) storetest.Harness {
		client := redistest.ClusterClient(t)
		prefix := redistest.ClusterPrefix(t)
		open := func() store.Backend {
			s, err := redisstore.New(client, redisstore.Options{Prefix: prefix, Retention: opts.Retention, Logger: testkit.Logger(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
		// Reopen is a second instance on the same cluster and prefix.
		return storetest.Harness{Store: open(), Reopen: open}
	})
}
