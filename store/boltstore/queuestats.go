package boltstore

import (
	"bytes"
	"context"

	bolt "go.etcd.io/bbolt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// QueueDepth walks the queue's ready bucket, which is ordered by score
// (ready time, or lease end once claimed), counting the scores that have
// passed, and of the others those held under a lease.
func (s *Store) QueueDepth(ctx context.Context, queue string, now int64) (store.QueueDepth, error) {
	if !event.ValidName(queue) {
		return store.QueueDepth{}, invalid("queue %q", queue)
	}
	if err := ctx.Err(); err != nil {
		return store.QueueDepth{}, err
	}
	var d store.QueueDepth
	err := s.db.View(func(tx *bolt.Tx) error {
		qs := tx.Bucket(bQueues)
		if qs == nil {
			return nil
		}
		q := qs.Bucket([]byte(queue))
		if q == nil {
			return nil
		}
		ready := q.Bucket(kReady)
		if ready == nil {
			return nil
		}
		// Job ids are names, which sort before 0xff: limit follows every
		// key whose score is at most now.
		limit := readyKey(now, "\xff")
		c := ready.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			d.Jobs++
			if bytes.Compare(k, limit) <= 0 {
				d.Due++
				continue
			}
			// Not yet due: delayed, or leased until its score.
			j, ok, err := getJob(tx, queue, string(k[8:]))
			if err != nil {
				return err
			}
			if ok && j.Lease != "" {
				d.Leased++
			}
		}
		return nil
	})
	return d, err
}
