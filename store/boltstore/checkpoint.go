package boltstore

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Checkpoints live in their own top-level bucket, created by the first one:
//
//	checkpoints/<type>:<id>/<ms><seq>   the encoded state
var bCheckpoints = []byte("checkpoints")

// keepCheckpoints is how many checkpoints a context keeps: the newest serves
// the cache, the older ones time travel to the past.
const keepCheckpoints = 4

// PutCheckpoint stores state as c's checkpoint at at and keeps only the newest
// few. Errors: ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) PutCheckpoint(ctx context.Context, c store.Context, at event.ID, state []byte) error {
	if err := checkContext(c); err != nil {
		return err
	}
	if at.IsZero() {
		return invalid("checkpoint at the zero id")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		all, err := tx.CreateBucketIfNotExists(bCheckpoints)
		if err != nil {
			return err
		}
		b, err := all.CreateBucketIfNotExists(contextKey(c))
		if err != nil {
			return err
		}
		if err := b.Put(idKey(at), bytes.Clone(state)); err != nil {
			return err
		}
		// Deleting while iterating moves a bbolt cursor, so the keys are
		// collected first, oldest first.
		var keys [][]byte
		cur := b.Cursor()
		for k, _ := cur.First(); k != nil; k, _ = cur.Next() {
			keys = append(keys, bytes.Clone(k))
		}
		for _, k := range keys[:max(0, len(keys)-keepCheckpoints)] {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	return dbErr(err)
}

// Checkpoint returns c's newest checkpoint at or before atOrBefore. Errors:
// ErrNotFound, ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) Checkpoint(ctx context.Context, c store.Context, atOrBefore event.ID) (event.ID, []byte, error) {
	if err := checkContext(c); err != nil {
		return event.ID{}, nil, err
	}
	if err := ctx.Err(); err != nil {
		return event.ID{}, nil, err
	}
	var (
		at    event.ID
		state []byte
		found bool
	)
	err := s.db.View(func(tx *bolt.Tx) error {
		all := tx.Bucket(bCheckpoints)
		if all == nil {
			return nil
		}
		b := all.Bucket(contextKey(c))
		if b == nil {
			return nil
		}
		cur := b.Cursor()
		k, v := cur.Seek(idKey(atOrBefore))
		switch {
		case k == nil:
			k, v = cur.Last()
		case !bytes.Equal(k, idKey(atOrBefore)):
			k, v = cur.Prev()
		}
		if k != nil {
			at, state, found = parseIDKey(k), bytes.Clone(v), true
		}
		return nil
	})
	if err != nil {
		return event.ID{}, nil, dbErr(err)
	}
	if !found {
		return event.ID{}, nil, errNoCheckpoint
	}
	return at, state, nil
}

var errNoCheckpoint = fmt.Errorf("boltstore: %w: no checkpoint", store.ErrNotFound)
