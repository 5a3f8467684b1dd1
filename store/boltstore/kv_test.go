package boltstore_test

import (
	"sync"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

// testClock is a clock the test moves by hand, so TTLs expire without
// waiting.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestKVConformance(t *testing.T) {
	storetest.RunKV(t, func(t *testing.T) storetest.KVHarness {
		clock := &testClock{t: time.UnixMilli(1764106747116)}
		s := newTestStore(t, tempPath(t), boltstore.Options{Now: clock.Now})
		return storetest.KVHarness{KV: s, Advance: clock.Advance}
	})
}

func BenchmarkKV(b *testing.B) {
	storetest.RunKVBenchmarks(b, func(b *testing.B) store.KV {
		return newTestStore(b, tempPath(b), boltstore.Options{})
	})
}
