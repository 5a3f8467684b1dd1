package boltstore_test

import (
	"testing"
	"time"

	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

func TestKVConformance(t *testing.T) {
	storetest.RunKV(t, func(t *testing.T) storetest.KVHarness {
		clock := testkit.NewClock(time.UnixMilli(1764106747116)) // moved by hand, so TTLs expire without waiting
		s := newTestStore(t, tempPath(t), boltstore.Options{Now: clock.Now})
		return storetest.KVHarness{KV: s, Advance: clock.Add}
	})
}

func BenchmarkKV(b *testing.B) {
	storetest.RunKVBenchmarks(b, func(b *testing.B) store.KV {
		return newTestStore(b, tempPath(b), boltstore.Options{})
	})
}
