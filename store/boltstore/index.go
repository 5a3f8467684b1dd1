package boltstore

import (
	"context"

	bolt "go.etcd.io/bbolt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

var (
	kMembers = []byte("m")
	kOrder   = []byte("o")
	kCount   = []byte("n")
)

// IndexAdd adds id to ix with score unless it is a member already. Errors:
// ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) IndexAdd(ctx context.Context, ix store.Index, id string, score int64) error {
	if !ix.Valid() {
		return invalid("index %+v", ix)
	}
	if !event.ValidName(id) {
		return invalid("index member %q", id)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return dbErr(s.db.Update(func(tx *bolt.Tx) error { return indexAdd(tx, ix, id, score) }))
}

func indexAdd(tx *bolt.Tx, ix store.Index, id string, score int64) error {
	b, err := tx.Bucket(bIndexes).CreateBucketIfNotExists(indexKey(ix))
	if err != nil {
		return err
	}
	members, err := b.CreateBucketIfNotExists(kMembers)
	if err != nil {
		return err
	}
	if members.Get([]byte(id)) != nil {
		return nil
	}
	order, err := b.CreateBucketIfNotExists(kOrder)
	if err != nil {
		return err
	}
	if err := members.Put([]byte(id), putUint64(uint64(score))); err != nil {
		return err
	}
	if err := order.Put(orderKey(score, id), []byte{}); err != nil {
		return err
	}
	return b.Put(kCount, putUint64(getUint64(b.Get(kCount))+1))
}

// IndexList returns limit members of ix after skipping offset, highest score
// first, ties by id. Errors: ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) IndexList(ctx context.Context, ix store.Index, offset, limit int) (store.IndexPage, error) {
	if !ix.Valid() {
		return store.IndexPage{}, invalid("index %+v", ix)
	}
	if offset < 0 || limit < 0 {
		return store.IndexPage{}, invalid("offset %d, limit %d", offset, limit)
	}
	if err := ctx.Err(); err != nil {
		return store.IndexPage{}, err
	}
	page := store.IndexPage{Entries: []store.IndexEntry{}}
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bIndexes).Bucket(indexKey(ix))
		if b == nil {
			return nil
		}
		page.Total = int64(getUint64(b.Get(kCount)))
		order := b.Bucket(kOrder)
		if order == nil || limit == 0 || int64(offset) >= page.Total {
			return nil
		}
		cur := order.Cursor()
		k, _ := cur.First()
		// Skipping walks the keys; pages are for humans, so offsets stay small.
		for i := 0; i < offset && k != nil; i++ {
			k, _ = cur.Next()
		}
		for ; k != nil && len(page.Entries) < limit; k, _ = cur.Next() {
			page.Entries = append(page.Entries, parseOrderKey(k))
		}
		return nil
	})
	if err != nil {
		return store.IndexPage{}, dbErr(err)
	}
	return page, nil
}
