package boltstore_test

import (
	"encoding/binary"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
)

// TestLengthsOfEarlierFilesMove: a file written when stream lengths had a
// bucket of their own answers them as before, and each moves beside its
// stream with the stream's next write (an append, a trim), leaving nothing
// behind.
func TestLengthsOfEarlierFilesMove(t *testing.T) {
	path := tempPath(t)
	ctx := t.Context()
	a := store.Context{Type: "flow", ID: "run-a"}
	b := store.Context{Type: "flow", ID: "run-b"}
	s, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	evs := func(n int) []event.Event {
		out := make([]event.Event, n)
		for i := range out {
			out[i] = event.Event{Kind: "log", Subject: "x"}
		}
		return out
	}
	for c, n := range map[store.Context]int{a: 3, b: 2} {
		if _, err := s.Append(ctx, c, evs(n), store.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Put the file back into the earlier layout: lengths in their bucket.
	lengthKey := func(c store.Context) []byte { return append([]byte(c.String()), 0) }
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, c := range []store.Context{a, b} {
			streams := tx.Bucket([]byte("streams"))
			v := streams.Get(lengthKey(c))
			if v == nil {
				t.Fatalf("no length beside stream %s", c)
			}
			if err := tx.Bucket([]byte("lengths")).Put([]byte(c.String()), v); err != nil {
				return err
			}
			if err := streams.Delete(lengthKey(c)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	length := func(c store.Context) int64 {
		t.Helper()
		info, err := s.Info(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		return info.Length
	}
	if la, lb := length(a), length(b); la != 3 || lb != 2 {
		t.Fatalf("lengths of the earlier file: %d and %d, want 3 and 2", la, lb)
	}
	res, err := s.Append(ctx, a, evs(2), store.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	trimmed, err := s.Trim(ctx, b, event.ID{MS: uint64(time.Now().Add(time.Hour).UnixMilli())})
	if err != nil || trimmed != 1 {
		t.Fatalf("trim = %d, %v; want the one event before the last", trimmed, err)
	}
	if la, lb := length(a), length(b); la != 5 || lb != 1 {
		t.Errorf("lengths after an append and a trim: %d and %d, want 5 and 1", la, lb)
	}
	if res.Events[1].ID.IsZero() {
		t.Fatal("append gave no ids")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	viewFile(t, path, func(tx *bolt.Tx) error {
		for c, want := range map[store.Context]uint64{a: 5, b: 1} {
			if v := tx.Bucket([]byte("lengths")).Get([]byte(c.String())); v != nil {
				t.Errorf("%s keeps a length in the earlier bucket", c)
			}
			if v := tx.Bucket([]byte("streams")).Get(lengthKey(c)); v == nil || binary.BigEndian.Uint64(v) != want {
				t.Errorf("%s's length beside its stream = %x, want %d", c, v, want)
			}
		}
		return nil
	})
}
