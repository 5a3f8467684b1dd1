package boltstore_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

func TestQueueStoreConformance(t *testing.T) {
	storetest.RunQueueStore(t, func(t *testing.T) (s, other storetest.QueueStoreStore) {
		st := testkit.Bolt(t, boltstore.Options{})
		// One process owns the file, so the second instance is the same one.
		return st, st
	})
}

func TestQueuePauseSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "nqd.db")
	st, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetQueuePaused(ctx, "default", true); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	if got, err := st.PausedQueues(ctx); err != nil || !slices.Equal(got, []string{"default"}) {
		t.Fatalf("PausedQueues after a restart = %v, %v; want [default]", got, err)
	}
}
