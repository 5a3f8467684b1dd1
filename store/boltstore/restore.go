package boltstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Restore writes evs with their ids as c's stream, and record as its run
// record, in one transaction. Errors: store.ErrConflict, store.ErrInvalid,
// store.ErrUnavailable, store.ErrClosed.
func (s *Store) Restore(ctx context.Context, c store.Context, evs []event.Event, record *store.RunMeta) error {
	bodies, err := store.CheckRestore(c, evs, record)
	if err != nil {
		return fmt.Errorf("boltstore: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ck := contextKey(c)
	err = s.db.Update(func(tx *bolt.Tx) error {
		streams := tx.Bucket(bStreams)
		if b := streams.Bucket(ck); b != nil {
			if k, _ := b.Cursor().First(); k != nil {
				return fmt.Errorf("%w: %s has events", errConflict, c)
			}
		}
		if streamLength(tx, ck) != 0 {
			return fmt.Errorf("%w: %s has events", errConflict, c)
		}
		var runs *bolt.Bucket
		var rk []byte
		if record != nil {
			var err error
			if runs, err = tx.CreateBucketIfNotExists(bRuns); err != nil {
				return err
			}
			rk = runKey(record.FlowName, record.RunID)
			if runs.Get(rk) != nil {
				return fmt.Errorf("%w: run %s has a record", errConflict, rk)
			}
		}

		stream, err := streams.CreateBucketIfNotExists(ck)
		if err != nil {
			return err
		}
		for i, e := range evs {
			if err := stream.Put(idKey(e.ID), bodies[i]); err != nil {
				return err
			}
		}
		if err := setStreamLength(tx, ck, uint64(len(evs))); err != nil {
			return err
		}
		if err := indexEvents(tx, c, evs, true); err != nil {
			return err
		}
		if record == nil {
			return nil
		}
		m := *record
		m.Version = max(m.Version, 1) // a stored record has been written at least once
		body, err := json.Marshal(m)
		if err != nil {
			return err
		}
		if err := runs.Put(rk, body); err != nil {
			return err
		}
		return indexAdd(tx, statusIndex(m.FlowName, m.Status), m.RunID, m.StartedAt)
	})
	if errors.Is(err, store.ErrConflict) {
		return err
	}
	return dbErr(err)
}
