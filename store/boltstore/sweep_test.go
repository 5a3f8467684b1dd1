package boltstore

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Expired idempotency records are removed by later appends, so the file does
// not grow with every key ever used.
func TestExpiredIdempotencyRecordsAreSwept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nqd.db")
	now := time.UnixMilli(1_700_000_000_000)
	s, err := Open(path, Options{Now: func() time.Time { return now }, IdempotencyWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c := store.Context{Type: "flow", ID: "run-sweep"}
	appendKeyed := func(key string) {
		t.Helper()
		if _, err := s.Append(t.Context(), c, []event.Event{{Kind: "log"}}, store.AppendOptions{IdempotencyKey: key}); err != nil {
			t.Fatal(err)
		}
	}
	const old = 2 * sweepLimit // more than one commit sweeps
	for i := range old {
		appendKeyed(fmt.Sprintf("old-%d", i))
	}
	now = now.Add(time.Minute)
	appendKeyed("fresh-1")
	appendKeyed("fresh-2")
	appendKeyed("fresh-3")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		if n := tx.Bucket(bIdemExp).Stats().KeyN; n != 3 {
			t.Errorf("expiry entries = %d, want 3 (the fresh keys)", n)
		}
		if n := tx.Bucket(bIdem).Bucket(contextKey(c)).Stats().KeyN; n != 3 {
			t.Errorf("idempotency records = %d, want 3 (the fresh keys)", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
