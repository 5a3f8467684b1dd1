package redisstore_test

import (
	"testing"

	"github.com/nqd-dev/nqd/store/redisstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

func TestTrimConformance(t *testing.T) {
	storetest.RunTrim(t, func(t *testing.T) storetest.TrimStore {
		s, _ := newTestStore(t, redisstore.Options{})
		return s
	})
}
