package boltstore_test

import (
	"testing"

	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

func TestRestoreConformance(t *testing.T) {
	storetest.RunRestore(t, func(t *testing.T) storetest.RestoreStore {
		s := testkit.Bolt(t, boltstore.Options{})
		return s
	})
}
