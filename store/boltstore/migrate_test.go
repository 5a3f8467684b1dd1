package boltstore_test

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
)

// TestOpenMovesIndexesOfEarlierFiles writes indexes as files written before
// the one index bucket held them (a bucket per index, with a bucket of
// members and the count), more members in one than a move takes in one
// transaction, and opens the file: every index lists as it did, takes new
// members, and the old buckets are gone.
func TestOpenMovesIndexesOfEarlierFiles(t *testing.T) {
	path := tempPath(t)
	const runs, flow = 12_345, "billing"
	score := func(i int) int64 { return 1_700_000_000_000 + int64(i/3) } // ties too
	id := func(i int) string { return fmt.Sprintf("run-%05d", i) }
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		old, err := tx.CreateBucket([]byte("indexes"))
		if err != nil {
			return err
		}
		// The order buckets, which the move rebuilds from the members,
		// are left empty.
		put := func(name string, members []int) error {
			ix, err := old.CreateBucket([]byte(name))
			if err != nil {
				return err
			}
			m, err := ix.CreateBucket([]byte("m"))
			if err != nil {
				return err
			}
			if _, err := ix.CreateBucket([]byte("o")); err != nil {
				return err
			}
			for _, i := range members {
				if err := m.Put([]byte(id(i)), binary.BigEndian.AppendUint64(nil, uint64(score(i)))); err != nil {
					return err
				}
			}
			return ix.Put([]byte("n"), binary.BigEndian.AppendUint64(nil, uint64(len(members))))
		}
		all, some := make([]int, runs), []int{3, 7, 11}
		for i := range all {
			all[i] = i
		}
		if err := put("flow", all); err != nil {
			return err
		}
		if err := put("flow:"+flow, all); err != nil {
			return err
		}
		return put("flow:"+flow+":status:completed", some)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := newTestStore(t, path, boltstore.Options{})
	ctx := t.Context()
	page, err := s.IndexList(ctx, store.Index{Type: "flow"}, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	// Highest score first, ties by id: the last three runs share one.
	want := []store.IndexEntry{{ID: id(runs - 3), Score: score(runs - 1)}, {ID: id(runs - 2), Score: score(runs - 1)}, {ID: id(runs - 1), Score: score(runs - 1)}, {ID: id(runs - 6), Score: score(runs - 4)}}
	if page.Total != runs || fmt.Sprint(page.Entries) != fmt.Sprint(want) {
		t.Fatalf("IndexList = %d %v, want %d %v", page.Total, page.Entries, runs, want)
	}
	last, err := s.IndexList(ctx, store.Index{Type: "flow"}, runs-1, 10)
	if err != nil || len(last.Entries) != 1 || last.Entries[0].ID != id(2) {
		t.Fatalf("the last entry = %+v, %v; want %s", last, err, id(2))
	}
	done, err := s.ListRuns(ctx, flow, "completed", 0, 10)
	if err != nil || done.Total != 3 || len(done.Runs) != 3 || done.Runs[0].RunID != id(11) || done.Runs[2].RunID != id(3) {
		t.Fatalf("ListRuns completed = %+v, %v; want runs 11, 7, 3", done, err)
	}
	if err := s.IndexAdd(ctx, store.Index{Type: "flow"}, "run-new", score(runs)+1); err != nil {
		t.Fatal(err)
	}
	if page, err := s.IndexList(ctx, store.Index{Type: "flow"}, 0, 1); err != nil || page.Total != runs+1 || page.Entries[0].ID != "run-new" {
		t.Fatalf("after IndexAdd: %+v, %v", page, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	viewFile(t, path, func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("indexes")) != nil {
			return fmt.Errorf("the old index buckets are still there")
		}
		return nil
	})
}

// viewFile reads the file of a closed store with bbolt itself.
func viewFile(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	if err := db.View(fn); err != nil {
		t.Fatal(err)
	}
}
