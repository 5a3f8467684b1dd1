package boltstore

import (
	"bytes"
	"context"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// bKinds holds the kind index: a bucket per kind, keyed by position, whose
// values are "<type>\x00<id>\x00" + the 16-byte stream id + the stored body.
var bKinds = []byte("kinds")

// bConsumed marks entries of the kind index consumed: a bucket per kind,
// keyed by position like the index, trimmed with it.
var bConsumed = []byte("consumed")

// bWatched holds the kinds the index records, as keys with empty values.
var bWatched = []byte("watched")

// kindTrimLimit bounds the expired entries one append removes, so cleaning
// never makes one append slow.
const kindTrimLimit = 64

// indexKinds records the events of watched kinds among evs (just appended
// to c, ids set) under their kinds and drops entries that left the window.
// Reading the watched set in the append's transaction orders it with
// WatchKinds: an append committed after it sees the kind.
func (s *Store) indexKinds(tx *bolt.Tx, c store.Context, evs []event.Event, bodies [][]byte, nowMS uint64) error {
	watched := tx.Bucket(bWatched)
	if watched == nil {
		return nil
	}
	var all *bolt.Bucket
	window := uint64(s.kindWindow().Milliseconds())
	for i, e := range evs {
		if watched.Get([]byte(e.Kind)) == nil {
			continue
		}
		if all == nil {
			var err error
			if all, err = tx.CreateBucketIfNotExists(bKinds); err != nil {
				return err
			}
		}
		b, err := all.CreateBucketIfNotExists([]byte(e.Kind))
		if err != nil {
			return err
		}
		growing(b)
		cur := b.Cursor()
		pos := event.ID{MS: nowMS}
		if k, _ := cur.Last(); k != nil {
			if last := parseIDKey(k); pos.Compare(last) <= 0 {
				pos = last.Next()
			}
		}
		v := make([]byte, 0, len(c.Type)+len(c.ID)+2+idLen+len(bodies[i]))
		v = append(append(append(append(v, c.Type...), 0), c.ID...), 0)
		v = append(append(v, idKey(e.ID)...), bodies[i]...)
		if err := b.Put(idKey(pos), v); err != nil {
			return err
		}
		var dead [][]byte
		for k, _ := cur.First(); k != nil && len(dead) < kindTrimLimit && parseIDKey(k).MS+window < nowMS; k, _ = cur.Next() {
			dead = append(dead, k)
		}
		var taken *bolt.Bucket
		if c := tx.Bucket(bConsumed); c != nil {
			taken = c.Bucket([]byte(e.Kind))
		}
		for _, k := range dead {
			if err := b.Delete(k); err != nil {
				return err
			}
			if taken != nil {
				if err := taken.Delete(k); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// WatchKinds adds kinds to the watched set. Errors: store.ErrInvalid,
// store.ErrUnavailable, store.ErrClosed.
func (s *Store) WatchKinds(ctx context.Context, kinds ...string) error {
	for _, k := range kinds {
		if !event.ValidKind(k) {
			return invalid("watch kinds: kind %q", k)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(kinds) == 0 {
		return nil
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bWatched)
		if err != nil {
			return err
		}
		for _, k := range kinds {
			if b.Get([]byte(k)) != nil {
				continue
			}
			if err := b.Put([]byte(k), []byte{}); err != nil {
				return err
			}
		}
		return nil
	})
	return dbErr(err)
}

func (s *Store) kindWindow() time.Duration {
	if s.opts.KindWindow > 0 {
		return s.opts.KindWindow
	}
	return store.DefaultKindWindow
}

// KindEvents reads the kind index. Errors: store.ErrInvalid,
// store.ErrUnavailable, store.ErrClosed.
func (s *Store) KindEvents(ctx context.Context, kind string, after event.ID, limit int) ([]store.KindEntry, error) {
	if !event.ValidKind(kind) || limit < 1 || limit > 1000 {
		return nil, invalid("kind events: kind %q, limit %d", kind, limit)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []store.KindEntry
	err := s.db.View(func(tx *bolt.Tx) error {
		all := tx.Bucket(bKinds)
		if all == nil {
			return nil
		}
		b := all.Bucket([]byte(kind))
		if b == nil {
			return nil
		}
		var taken *bolt.Bucket
		if c := tx.Bucket(bConsumed); c != nil {
			taken = c.Bucket([]byte(kind))
		}
		cur := b.Cursor()
		k, v := cur.Seek(idKey(after))
		if k != nil && parseIDKey(k) == after {
			k, v = cur.Next()
		}
		for ; k != nil && len(out) < limit; k, v = cur.Next() {
			en, err := decodeKindEntry(k, v)
			if err != nil {
				return err
			}
			en.Consumed = taken != nil && taken.Get(k) != nil
			out = append(out, en)
		}
		return nil
	})
	if err != nil {
		return nil, dbErr(err)
	}
	return out, nil
}

func decodeKindEntry(k, v []byte) (store.KindEntry, error) {
	typ, rest, ok1 := bytes.Cut(v, []byte{0})
	id, rest, ok2 := bytes.Cut(rest, []byte{0})
	if !ok1 || !ok2 || len(rest) < idLen {
		return store.KindEntry{}, fmt.Errorf("kind entry %s: malformed", parseIDKey(k))
	}
	ev, err := event.DecodeStored(parseIDKey(rest[:idLen]), rest[idLen:])
	if err != nil {
		return store.KindEntry{}, fmt.Errorf("kind entry %s: %w", parseIDKey(k), err)
	}
	return store.KindEntry{Seq: parseIDKey(k), Context: store.Context{Type: string(typ), ID: string(id)}, Event: ev}, nil
}

// checkUnconsumed returns store.ErrConflict if one of refs is consumed.
func checkUnconsumed(tx *bolt.Tx, refs []store.KindRef) error {
	all := tx.Bucket(bConsumed)
	if all == nil {
		return nil
	}
	for _, r := range refs {
		if b := all.Bucket([]byte(r.Kind)); b != nil && b.Get(idKey(r.Seq)) != nil {
			return fmt.Errorf("%w: event %s %v already consumed", errConflict, r.Kind, r.Seq)
		}
	}
	return nil
}

// markConsumed marks refs consumed by run, after checkUnconsumed passed in
// the same transaction.
func markConsumed(tx *bolt.Tx, run string, refs []store.KindRef) error {
	if len(refs) == 0 {
		return nil
	}
	all, err := tx.CreateBucketIfNotExists(bConsumed)
	if err != nil {
		return err
	}
	for _, r := range refs {
		b, err := all.CreateBucketIfNotExists([]byte(r.Kind))
		if err != nil {
			return err
		}
		if err := b.Put(idKey(r.Seq), []byte(run)); err != nil {
			return err
		}
	}
	return nil
}
