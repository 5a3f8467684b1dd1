package boltstore

import (
	"context"
	"encoding/binary"
	"strings"

	"github.com/nqd-dev/nqd/store"
	bolt "go.etcd.io/bbolt"
)

func parseTimer(name string, due int64) (store.Timer, bool) {
	p := strings.SplitN(name, ":", 4)
	if len(p) != 4 {
		return store.Timer{}, false
	}
	return store.Timer{Kind: p[0], FlowName: p[1], RunID: p[2], Step: p[3], Due: due}, true
}

func timerBuckets(tx *bolt.Tx) (due, byName *bolt.Bucket, err error) {
	t, err := tx.CreateBucketIfNotExists(bTimers)
	if err != nil {
		return nil, nil, err
	}
	if due, err = t.CreateBucketIfNotExists(kDue); err != nil {
		return nil, nil, err
	}
	byName, err = t.CreateBucketIfNotExists(kByName)
	return due, byName, err
}

func clearTimer(tx *bolt.Tx, name string) error {
	due, byName, err := timerBuckets(tx)
	if err != nil {
		return err
	}
	v := byName.Get([]byte(name))
	if v == nil {
		return nil
	}
	if err := due.Delete(readyKey(int64(getUint64(v)), name)); err != nil {
		return err
	}
	return byName.Delete([]byte(name))
}

func setTimer(tx *bolt.Tx, name string, at int64) error {
	if err := clearTimer(tx, name); err != nil {
		return err
	}
	due, byName, err := timerBuckets(tx)
	if err != nil {
		return err
	}
	if err := byName.Put([]byte(name), putUint64(uint64(at))); err != nil {
		return err
	}
	return due.Put(readyKey(at, name), []byte{})
}

// DueTimers claims timers due at now. Errors: ErrClosed, ErrUnavailable.
func (s *Store) DueTimers(ctx context.Context, now, holdUntil int64, max int) ([]store.Timer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []store.Timer
	anyDue := false
	_ = s.db.View(func(tx *bolt.Tx) error {
		if t := tx.Bucket(bTimers); t != nil && t.Bucket(kDue) != nil {
			k, _ := t.Bucket(kDue).Cursor().First()
			anyDue = k != nil && int64(binary.BigEndian.Uint64(k)^(1<<63)) <= now
		}
		return nil
	})
	if !anyDue {
		return nil, nil
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		out = out[:0]
		due, _, err := timerBuckets(tx)
		if err != nil {
			return err
		}
		type hit struct {
			name string
			at   int64
		}
		var hits []hit
		cur := due.Cursor()
		for k, _ := cur.First(); k != nil && len(hits) < max; k, _ = cur.Next() {
			at := int64(binary.BigEndian.Uint64(k) ^ (1 << 63))
			if at > now {
				break
			}
			hits = append(hits, hit{string(k[8:]), at})
		}
		for _, h := range hits {
			if err := setTimer(tx, h.name, holdUntil); err != nil {
				return err
			}
			if t, ok := parseTimer(h.name, h.at); ok {
				out = append(out, t)
			}
		}
		return nil
	})
	return out, dbErr(err)
}
