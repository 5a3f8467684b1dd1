package boltstore_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nqd-dev/nqd/store/boltstore"
)

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
