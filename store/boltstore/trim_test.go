package boltstore_test

import (
	"testing"

	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

func TestTrimConformance(t *testing.T) {
	storetest.RunTrim(t, func(t *testing.T) storetest.TrimStore {
		return newTestStore(t, tempPath(t), boltstore.Options{})
	})
}
