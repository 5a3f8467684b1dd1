package boltstore_test

import (
	"testing"

	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

func TestKindsConformance(t *testing.T) {
	storetest.RunKinds(t, func(t *testing.T) storetest.KindStore {
		s := testkit.Bolt(t, boltstore.Options{})
		return s
	})
}
