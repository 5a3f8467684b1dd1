package redisstore_test

import (
	"testing"

	"github.com/nqd-dev/nqd/store/redisstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

func TestQueueStatsConformance(t *testing.T) {
	storetest.RunQueueStats(t, func(t *testing.T) storetest.QueueStatsStore {
		s, _ := newTestStore(t, redisstore.Options{})
		return s
	})
}
