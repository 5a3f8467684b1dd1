package boltstore

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Range reads c's events selected by q. Errors: ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) Range(ctx context.Context, c store.Context, q store.RangeQuery) ([]event.Event, error) {
	if err := checkContext(c); err != nil {
		return nil, err
	}
	if q.Limit < 0 {
		return nil, invalid("negative limit %d", q.Limit)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := []event.Event{}
	lo, hi, ok := q.Bounds()
	if !ok {
		return out, nil
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		stream := tx.Bucket(bStreams).Bucket(contextKey(c))
		if stream == nil {
			return nil
		}
		cur := stream.Cursor()
		var dec event.Decoder
		var k, v []byte
		next := cur.Next
		switch {
		case !q.Reverse:
			k, v = cur.Seek(idKey(lo))
		case hi == event.MaxID:
			k, v = cur.Last()
			next = cur.Prev
		default:
			// Seek lands on the first id at or after hi; the one before it is
			// the newest inside the range.
			if k, _ = cur.Seek(idKey(hi)); k == nil {
				k, v = cur.Last()
			} else {
				k, v = cur.Prev()
			}
			next = cur.Prev
		}
		for ; k != nil; k, v = next() {
			id := parseIDKey(k)
			if id.Compare(lo) < 0 || (hi != event.MaxID && id.Compare(hi) >= 0) {
				break
			}
			e, err := dec.Decode(id, v)
			if err != nil {
				return fmt.Errorf("decode %s %s: %w", c, id, err)
			}
			out = append(out, e)
			if q.Limit > 0 && len(out) == q.Limit {
				break
			}
		}
		return nil
	})
	if err != nil {
		return nil, dbErr(err)
	}
	return out, nil
}

// Info returns c's length and first and last ids. Errors: ErrInvalid,
// ErrClosed, ErrUnavailable.
func (s *Store) Info(ctx context.Context, c store.Context) (store.StreamInfo, error) {
	if err := checkContext(c); err != nil {
		return store.StreamInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.StreamInfo{}, err
	}
	var info store.StreamInfo
	err := s.db.View(func(tx *bolt.Tx) error {
		ck := contextKey(c)
		stream := tx.Bucket(bStreams).Bucket(ck)
		if stream == nil {
			return nil
		}
		cur := stream.Cursor()
		if k, _ := cur.First(); k != nil {
			info.FirstID = parseIDKey(k)
		}
		if k, _ := cur.Last(); k != nil {
			info.LastID = parseIDKey(k)
		}
		info.Length = int64(streamLength(tx, ck))
		return nil
	})
	if err != nil {
		return store.StreamInfo{}, dbErr(err)
	}
	return info, nil
}
