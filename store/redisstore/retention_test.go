package redisstore_test

import (
	"testing"

	"github.com/nqd-dev/nqd/store/redisstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

func TestRetentionConformance(t *testing.T) {
	storetest.RunRetention(t, func(t *testing.T) storetest.RetentionStore {
		s, _ := newTestStore(t, redisstore.Options{Retention: storetest.RetentionPolicy})
		return s
	})
}
