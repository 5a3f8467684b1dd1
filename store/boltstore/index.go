package boltstore

import (
	"bytes"
	"context"

	bolt "go.etcd.io/bbolt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Every index lives in the one bucket bIndex, under its indexKey and a 0
// byte (which no index key holds, so no index's keys run into another's):
//
//	<index> 0 'm' <member>             the member's score
//	<index> 0 'n'                      how many members
//	<index> 0 'o' <orderKey(score, member)>  (empty) the listing order
//
// A new run's member sorts last among the 'm' keys (run ids grow with
// time) and its order key first among the 'o' keys (the highest score
// first), so both land next to the count, in the same leaf: adding a run to
// an index rewrites one page and the branch pages above it, which the
// other indexes in the commit share. The earlier layout (migrate.go), a
// bucket per index with a bucket each for members and order, rewrote three
// leaves, their branch pages and the buckets' headers, and a commit's
// fsync cost grows with the pages it writes.
const (
	tagMember = 'm'
	tagCount  = 'n'
	tagOrder  = 'o'
)

// ixKeys builds the keys of one index.
type ixKeys struct{ prefix []byte }

func keysOf(ix store.Index) ixKeys { return ixKeys{prefix: append(indexKey(ix), 0)} }

func (k ixKeys) tagged(tag byte, rest ...[]byte) []byte {
	n := len(k.prefix) + 1
	for _, r := range rest {
		n += len(r)
	}
	b := make([]byte, 0, n)
	b = append(append(b, k.prefix...), tag)
	for _, r := range rest {
		b = append(b, r...)
	}
	return b
}

func (k ixKeys) member(id string) []byte { return k.tagged(tagMember, []byte(id)) }
func (k ixKeys) count() []byte           { return k.tagged(tagCount) }
func (k ixKeys) order(score int64, id string) []byte {
	return k.tagged(tagOrder, orderKey(score, id))
}
func (k ixKeys) members() []byte { return k.tagged(tagMember) }
func (k ixKeys) orders() []byte  { return k.tagged(tagOrder) }

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
	b, k := tx.Bucket(bIndex), keysOf(ix)
	member := k.member(id)
	if b.Get(member) != nil {
		return nil
	}
	if err := b.Put(member, putUint64(uint64(score))); err != nil {
		return err
	}
	if err := b.Put(k.order(score, id), []byte{}); err != nil {
		return err
	}
	return b.Put(k.count(), putUint64(getUint64(b.Get(k.count()))+1))
}

func indexRemove(tx *bolt.Tx, ix store.Index, id string) error {
	b, k := tx.Bucket(bIndex), keysOf(ix)
	member := k.member(id)
	v := b.Get(member)
	if v == nil {
		return nil
	}
	if err := b.Delete(k.order(int64(getUint64(v)), id)); err != nil {
		return err
	}
	if err := b.Delete(member); err != nil {
		return err
	}
	return b.Put(k.count(), putUint64(getUint64(b.Get(k.count()))-1))
}

// indexDrop removes ix whole.
func indexDrop(tx *bolt.Tx, ix store.Index) error {
	prefix := keysOf(ix).prefix
	c := tx.Bucket(bIndex).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// indexMembers calls fn with each member of ix, in member order.
func indexMembers(tx *bolt.Tx, ix store.Index, fn func(id string)) {
	prefix := keysOf(ix).members()
	c := tx.Bucket(bIndex).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		fn(string(k[len(prefix):]))
	}
}

// indexPage calls fn with the entries of ix after skipping offset, highest
// score first, ties by id, until fn returns false, and returns the index's
// size.
func indexPage(tx *bolt.Tx, ix store.Index, offset int, fn func(store.IndexEntry) (bool, error)) (int64, error) {
	b, k := tx.Bucket(bIndex), keysOf(ix)
	total := int64(getUint64(b.Get(k.count())))
	if int64(offset) >= total {
		return total, nil
	}
	prefix := k.orders()
	c := b.Cursor()
	key, _ := c.Seek(prefix)
	// Skipping walks the keys; pages are for humans, so offsets stay small.
	for i := 0; i < offset && key != nil; i++ {
		key, _ = c.Next()
	}
	for ; key != nil && bytes.HasPrefix(key, prefix); key, _ = c.Next() {
		more, err := fn(parseOrderKey(key[len(prefix):]))
		if err != nil || !more {
			return total, err
		}
	}
	return total, nil
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
		var err error
		page.Total, err = indexPage(tx, ix, offset, func(e store.IndexEntry) (bool, error) {
			if len(page.Entries) >= limit {
				return false, nil
			}
			page.Entries = append(page.Entries, e)
			return len(page.Entries) < limit, nil
		})
		return err
	})
	if err != nil {
		return store.IndexPage{}, dbErr(err)
	}
	return page, nil
}
