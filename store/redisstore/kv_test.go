package redisstore_test

import (
	"testing"

	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/redisstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

func TestKVConformance(t *testing.T) {
	storetest.RunKV(t, func(t *testing.T) storetest.KVHarness {
		s, _ := newTestStore(t, redisstore.Options{})
		return storetest.KVHarness{KV: s}
	})
}

func BenchmarkKV(b *testing.B) {
	storetest.RunKVBenchmarks(b, func(b *testing.B) store.KV {
		s, _ := newTestStore(b, redisstore.Options{})
		return s
	})
}
