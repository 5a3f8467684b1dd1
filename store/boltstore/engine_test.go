package boltstore_test

import (
	"path/filepath"
	"testing"

	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

func TestEngineConformance(t *testing.T) {
	storetest.RunEngine(t, func(t *testing.T) storetest.EngineStore {
		s, err := boltstore.Open(filepath.Join(t.TempDir(), "nqd.db"), boltstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestRetentionConformance(t *testing.T) {
	storetest.RunRetention(t, func(t *testing.T) storetest.RetentionStore {
		s, err := boltstore.Open(filepath.Join(t.TempDir(), "nqd.db"), boltstore.Options{Retention: storetest.RetentionPolicy})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
