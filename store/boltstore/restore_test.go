package boltstore_test

import (
	"path/filepath"
	"testing"

	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

func TestRestoreConformance(t *testing.T) {
	storetest.RunRestore(t, func(t *testing.T) storetest.RestoreStore {
		s, err := boltstore.Open(filepath.Join(t.TempDir(), "nqd.db"), boltstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
