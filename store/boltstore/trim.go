package boltstore

import (
	"bytes"
	"context"

	bolt "go.etcd.io/bbolt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Trim removes c's events below before, keeping the newest, and lowers the
// stream's length to match. Errors: ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) Trim(ctx context.Context, c store.Context, before event.ID) (int64, error) {
	if err := checkContext(c); err != nil {
		return 0, err
	}
	if before.IsZero() {
		return 0, invalid("trim before the zero id")
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var n int64
	err := s.db.Update(func(tx *bolt.Tx) error {
		ck := contextKey(c)
		stream := tx.Bucket(bStreams).Bucket(ck)
		if stream == nil {
			return nil
		}
		cur := stream.Cursor()
		last, _ := cur.Last()
		if last == nil {
			return nil
		}
		// Append reads the last key for the next id, so it must survive.
		bound := idKey(before)
		if bytes.Compare(bound, last) > 0 {
			bound = last
		}
		// Deleting while iterating moves a bbolt cursor, and restarting
		// from the first key after each delete walks the emptied pages
		// again, so the keys are collected first.
		var keys [][]byte
		for k, _ := cur.First(); k != nil && bytes.Compare(k, bound) < 0; k, _ = cur.Next() {
			keys = append(keys, bytes.Clone(k))
		}
		for _, k := range keys {
			if err := stream.Delete(k); err != nil {
				return err
			}
		}
		n = int64(len(keys))
		if n == 0 {
			return nil
		}
		return setStreamLength(tx, ck, streamLength(tx, ck)-uint64(n))
	})
	if err != nil {
		return 0, dbErr(err)
	}
	return n, nil
}
