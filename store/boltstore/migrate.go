package boltstore

import (
	"bytes"

	bolt "go.etcd.io/bbolt"
)

// Files written before bIndex held each index as a bucket of its own in
// bIndexesV1, with a bucket of members (kMembers: member → score), one of
// the listing order and the count (kCount). Open moves them into bIndex.
var (
	bIndexesV1 = []byte("indexes")
	kMembers   = []byte("m")
	kCount     = []byte("n")
)

// migrateBatch bounds the members moved in one transaction, so that a large
// file moves in bounded memory.
const migrateBatch = 10_000

// migrateIndexes moves every index of bIndexesV1 into bIndex and removes
// bIndexesV1. Each transaction moves up to migrateBatch members, taking them
// out of the old index as it writes them to the new, and an index's count
// moves with its last members, so a move cut short by a crash is finished by
// the next Open, and nothing is served before it is.
func migrateIndexes(db *bolt.DB) error {
	for {
		done := false
		err := db.Update(func(tx *bolt.Tx) error {
			old := tx.Bucket(bIndexesV1)
			if old == nil {
				done = true
				return nil
			}
			name, _ := old.Cursor().First()
			if name == nil {
				done = true
				return tx.DeleteBucket(bIndexesV1)
			}
			return moveIndex(tx.Bucket(bIndex), old, name)
		})
		if err != nil || done {
			return err
		}
	}
}

// moveIndex moves up to migrateBatch members of the old index name into
// into, and once none are left its count, and removes it.
func moveIndex(into, old *bolt.Bucket, name []byte) error {
	k := ixKeys{prefix: append(bytes.Clone(name), 0)}
	ob := old.Bucket(name)
	if ob == nil { // not a bucket: nothing any version wrote
		return old.Delete(name)
	}
	if members := ob.Bucket(kMembers); members != nil {
		c := members.Cursor()
		n := 0
		for id, score := c.First(); id != nil && n < migrateBatch; id, score = c.First() {
			if err := into.Put(k.member(string(id)), bytes.Clone(score)); err != nil {
				return err
			}
			if err := into.Put(k.order(int64(getUint64(score)), string(id)), []byte{}); err != nil {
				return err
			}
			if err := c.Delete(); err != nil {
				return err
			}
			n++
		}
		if n == migrateBatch {
			return nil // more in the next transaction
		}
	}
	if count := ob.Get(kCount); count != nil {
		if err := into.Put(k.count(), bytes.Clone(count)); err != nil {
			return err
		}
	}
	return old.DeleteBucket(name)
}
