// Package bolttest opens the embedded store for tests. It sits beside the
// store it opens, so the helpers every package's tests share
// (internal/testkit) need no store of their own.
package bolttest

import (
	"path/filepath"
	"testing"

	"github.com/nqd-dev/nqd/store/boltstore"
)

// Open opens an embedded store in a directory of its own, closed when the
// test ends; a failure to close fails the test.
func Open(t testing.TB, opts boltstore.Options) *boltstore.Store {
	t.Helper()
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "nqd.db"), opts)
	if err != nil {
		t.Fatalf("open the embedded store: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close the embedded store: %v", err)
		}
	})
	return s
}
