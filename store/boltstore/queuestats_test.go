package boltstore_test

import (
	"testing"

	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

func TestQueueStatsConformance(t *testing.T) {
	storetest.RunQueueStats(t, func(t *testing.T) storetest.QueueStatsStore {
		s := testkit.Bolt(t, boltstore.Options{})
		return s
	})
}
