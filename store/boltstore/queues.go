package boltstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// bPaused holds one key per paused queue. Claim reads it in its own
// transaction, so a pause is never raced by a claim in flight.
var bPaused = []byte("pausedqueues")

// SetQueuePaused pauses or resumes queue. Errors: ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) SetQueuePaused(ctx context.Context, queue string, paused bool) error {
	if !event.ValidName(queue) {
		return invalid("queue %q", queue)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return dbErr(s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bPaused)
		if err != nil {
			return err
		}
		if paused {
			return b.Put([]byte(queue), []byte{})
		}
		return b.Delete([]byte(queue))
	}))
}

// PausedQueues returns the paused queues in name order.
func (s *Store) PausedQueues(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := []string{}
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bPaused)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, dbErr(err)
}

// queuePaused reports whether queue is paused, within tx.
func queuePaused(tx *bolt.Tx, queue string) bool {
	b := tx.Bucket(bPaused)
	return b != nil && b.Get([]byte(queue)) != nil
}

// JobQueues returns the queues holding a job, in name order.
func (s *Store) JobQueues(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := []string{}
	err := s.db.View(func(tx *bolt.Tx) error {
		qs := tx.Bucket(bQueues)
		if qs == nil {
			return nil
		}
		return qs.ForEachBucket(func(name []byte) error {
			if ready := qs.Bucket(name).Bucket(kReady); ready != nil {
				if k, _ := ready.Cursor().First(); k != nil {
					out = append(out, string(name))
				}
			}
			return nil
		})
	})
	return out, dbErr(err)
}

// QueueJobs walks the queue's ready bucket from min, which is ordered by
// score and then job id.
func (s *Store) QueueJobs(ctx context.Context, queue string, min, max int64, offset, limit int) ([]store.Job, error) {
	if !event.ValidName(queue) {
		return nil, invalid("queue %q", queue)
	}
	if offset < 0 || limit < 0 {
		return nil, invalid("page offset %d, limit %d", offset, limit)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := []store.Job{}
	err := s.db.View(func(tx *bolt.Tx) error {
		qs := tx.Bucket(bQueues)
		if qs == nil {
			return nil
		}
		q := qs.Bucket([]byte(queue))
		if q == nil || q.Bucket(kReady) == nil || q.Bucket(kJobs) == nil {
			return nil
		}
		jobs := q.Bucket(kJobs)
		c := q.Bucket(kReady).Cursor()
		for k, _ := c.Seek(readyKey(min, "")); k != nil && len(out) < limit; k, _ = c.Next() {
			if int64(binary.BigEndian.Uint64(k)^(1<<63)) > max {
				break
			}
			if offset > 0 {
				offset--
				continue
			}
			v := jobs.Get(k[8:])
			if v == nil {
				continue // debris without its job, as Claim treats it
			}
			var j storedJob
			if err := json.Unmarshal(v, &j); err != nil {
				return fmt.Errorf("job %s: %w", k[8:], err)
			}
			j.ReadyAt = j.Score
			out = append(out, j.Job)
		}
		return nil
	})
	return out, dbErr(err)
}
