package boltstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Due times of finished runs live in a bucket of their own, written in the
// transaction that makes a run terminal:
//
//	retention/due/<due ms><flow>:<run>   empty: the reaper's order
//	retention/byrun/<flow>:<run>         due ms
var (
	bRetention = []byte("retention")
	kByRun     = []byte("byrun")
)

func retentionBuckets(tx *bolt.Tx) (due, byRun *bolt.Bucket, err error) {
	r, err := tx.CreateBucketIfNotExists(bRetention)
	if err != nil {
		return nil, nil, err
	}
	if due, err = r.CreateBucketIfNotExists(kDue); err != nil {
		return nil, nil, err
	}
	byRun, err = r.CreateBucketIfNotExists(kByRun)
	return due, byRun, err
}

func dueKey(due int64, name []byte) []byte {
	return append(binary.BigEndian.AppendUint64(nil, sortableScore(due)), name...)
}

// setExpiry records when flow:run is due, or forgets it for at == 0.
func setExpiry(tx *bolt.Tx, flow, run string, at int64) error {
	due, byRun, err := retentionBuckets(tx)
	if err != nil {
		return err
	}
	name := runKey(flow, run)
	if old := byRun.Get(name); old != nil {
		if err := due.Delete(dueKey(int64(getUint64(old)), name)); err != nil {
			return err
		}
		if err := byRun.Delete(name); err != nil {
			return err
		}
	}
	if at == 0 {
		return nil
	}
	if err := due.Put(dueKey(at, name), []byte{}); err != nil {
		return err
	}
	return byRun.Put(name, putUint64(uint64(at)))
}

// ExpiredRuns returns up to max runs due at now, earliest first. Errors:
// ErrClosed, ErrUnavailable.
func (s *Store) ExpiredRuns(ctx context.Context, now int64, max int) ([]store.ExpiredRun, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []store.ExpiredRun
	err := s.db.View(func(tx *bolt.Tx) error {
		r := tx.Bucket(bRetention)
		if r == nil || r.Bucket(kDue) == nil {
			return nil
		}
		cur := r.Bucket(kDue).Cursor()
		for k, _ := cur.First(); k != nil && len(out) < max; k, _ = cur.Next() {
			at := int64(binary.BigEndian.Uint64(k) ^ (1 << 63))
			if at > now {
				break
			}
			flow, run, ok := strings.Cut(string(k[8:]), ":")
			if !ok {
				continue
			}
			out = append(out, store.ExpiredRun{FlowName: flow, RunID: run, Due: at})
		}
		return nil
	})
	return out, dbErr(err)
}

// DeleteExpiredRun removes a due run in one transaction. Errors:
// ErrConflict, ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) DeleteExpiredRun(ctx context.Context, flow, run string, now int64) error {
	if !event.ValidName(flow) || !event.ValidContextID(run) {
		return invalid("run %q of flow %q", run, flow)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		r := tx.Bucket(bRetention)
		var at []byte
		if r != nil && r.Bucket(kByRun) != nil {
			at = r.Bucket(kByRun).Get(runKey(flow, run))
		}
		if at == nil || int64(getUint64(at)) > now {
			return fmt.Errorf("%w: run %s of %s is not due", errConflict, run, flow)
		}
		if err := deleteRun(tx, flow, run); err != nil {
			return err
		}
		return setExpiry(tx, flow, run, 0)
	})
	if errors.Is(err, store.ErrConflict) {
		return err
	}
	return dbErr(err)
}

// deleteRun removes everything nqd keeps of one run except its due time.
func deleteRun(tx *bolt.Tx, flow, run string) error {
	c := contextKey(store.Context{Type: "flow", ID: run})
	if tx.Bucket(bStreams).Bucket(c) != nil {
		if err := tx.Bucket(bStreams).DeleteBucket(c); err != nil {
			return err
		}
	}
	if err := dropStreamLength(tx, c); err != nil {
		return err
	}
	if cp := tx.Bucket(bCheckpoints); cp != nil && cp.Bucket(c) != nil {
		if err := cp.DeleteBucket(c); err != nil {
			return err
		}
	}
	for _, ix := range []store.Index{{Type: "flow"}, {Type: "flow", Name: flow}} {
		if err := indexRemove(tx, ix, run); err != nil {
			return err
		}
	}
	runs := tx.Bucket(bRuns)
	if runs == nil {
		return nil
	}
	v := runs.Get(runKey(flow, run))
	if v == nil {
		return nil
	}
	var m store.RunMeta
	if err := json.Unmarshal(v, &m); err != nil {
		return fmt.Errorf("run %s of %s: %w", run, flow, err)
	}
	if err := indexRemove(tx, statusIndex(flow, m.Status), run); err != nil {
		return err
	}
	return runs.Delete(runKey(flow, run))
}
