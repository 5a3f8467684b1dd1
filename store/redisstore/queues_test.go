package redisstore_test

import (
	"testing"

	"github.com/nqd-dev/nqd/internal/redistest"

	"github.com/nqd-dev/nqd/store/redisstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

func TestQueueStoreConformance(t *testing.T) {
	storetest.RunQueueStore(t, func(t *testing.T) (s, other storetest.QueueStoreStore) {
		prefix := redistest.Prefix(t)
		a, client := newTestStore(t, redisstore.Options{Prefix: prefix})
		// A second instance on the same Redis and prefix.
		b, err := redisstore.New(client, redisstore.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return a, b
	})
}
