package redisstore_test

import (
	"testing"

	"github.com/nqd-dev/nqd/store/redisstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

func TestKindsConformance(t *testing.T) {
	storetest.RunKinds(t, func(t *testing.T) storetest.KindStore {
		s, _ := newTestStore(t, redisstore.Options{})
		return s
	})
}
