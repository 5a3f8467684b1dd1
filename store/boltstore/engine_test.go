package boltstore_test

import (
	"testing"

	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

func TestEngineConformance(t *testing.T) {
	storetest.RunEngine(t, func(t *testing.T) storetest.EngineStore {
		s := testkit.Bolt(t, boltstore.Options{})
		return s
	})
}

func TestRetentionConformance(t *testing.T) {
	storetest.RunRetention(t, func(t *testing.T) storetest.RetentionStore {
		s := testkit.Bolt(t, boltstore.Options{Retention: storetest.RetentionPolicy})
		return s
	})
}
