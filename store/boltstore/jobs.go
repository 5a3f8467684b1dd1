package boltstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/jsonscan"
	"github.com/nqd-dev/nqd/store"
	bolt "go.etcd.io/bbolt"
)

// storedJob is a job with the score that orders it in its queue.
type storedJob struct {
	store.Job
	Score int64 `json:"score"`
}

func queueBuckets(tx *bolt.Tx, queue string) (jobs, ready *bolt.Bucket, err error) {
	qs, err := tx.CreateBucketIfNotExists(bQueues)
	if err != nil {
		return nil, nil, err
	}
	q, err := qs.CreateBucketIfNotExists([]byte(queue))
	if err != nil {
		return nil, nil, err
	}
	if jobs, err = q.CreateBucketIfNotExists(kJobs); err != nil {
		return nil, nil, err
	}
	ready, err = q.CreateBucketIfNotExists(kReady)
	return jobs, ready, err
}

func readyKey(score int64, id string) []byte {
	return append(binary.BigEndian.AppendUint64(nil, sortableScore(score)), id...)
}

// jobValue is the stored job id of queue, or nil.
func jobValue(tx *bolt.Tx, queue, id string) []byte {
	qs := tx.Bucket(bQueues)
	if qs == nil {
		return nil
	}
	q := qs.Bucket([]byte(queue))
	if q == nil || q.Bucket(kJobs) == nil {
		return nil
	}
	return q.Bucket(kJobs).Get([]byte(id))
}

func getJob(tx *bolt.Tx, queue, id string) (storedJob, bool, error) {
	var j storedJob
	v := jobValue(tx, queue, id)
	if v == nil {
		return j, false, nil
	}
	if err := json.Unmarshal(v, &j); err != nil {
		return j, false, fmt.Errorf("job %s: %w", id, err)
	}
	j.ReadyAt = j.Score
	return j, true, nil
}

// jobHead is what a lease check and a deletion read of a stored job.
type jobHead struct {
	lease string
	score int64
}

// headOf scans a stored job for its head, without decoding its input and
// the rest as getJob does, on the path of every completion.
func headOf(id string, v []byte) (jobHead, error) {
	var h jobHead
	ok := jsonscan.Fields(v, []string{"lease", "score"}, func(i int, val []byte) (ok bool) {
		if i == 0 {
			h.lease, ok = jsonscan.String(val)
			return ok
		}
		var n int
		n, ok = jsonscan.Int(val)
		h.score = int64(n)
		return ok
	})
	if ok {
		return h, nil
	}
	var j storedJob // whatever the scan does not take, encoding/json reads
	if err := json.Unmarshal(v, &j); err != nil {
		return h, fmt.Errorf("job %s: %w", id, err)
	}
	return jobHead{lease: j.Lease, score: j.Score}, nil
}

func deleteJob(tx *bolt.Tx, queue, id string) error {
	v := jobValue(tx, queue, id)
	if v == nil {
		return nil
	}
	h, err := headOf(id, v)
	if err != nil {
		return err
	}
	jobs, ready, err := queueBuckets(tx, queue)
	if err != nil {
		return err
	}
	if err := ready.Delete(readyKey(h.score, id)); err != nil {
		return err
	}
	return jobs.Delete([]byte(id))
}

// writeJob stores j ordered by score, replacing any earlier version.
func writeJob(tx *bolt.Tx, j storedJob) error {
	if err := deleteJob(tx, j.Queue, j.ID); err != nil {
		return err
	}
	jobs, ready, err := queueBuckets(tx, j.Queue)
	if err != nil {
		return err
	}
	body, err := json.Marshal(j)
	if err != nil {
		return err
	}
	if err := jobs.Put([]byte(j.ID), body); err != nil {
		return err
	}
	return ready.Put(readyKey(j.Score, j.ID), []byte{})
}

func putJob(tx *bolt.Tx, j store.Job) error {
	if j.Attempt < 1 {
		j.Attempt = 1
	}
	if j.Lease != "" {
		// Enqueued already claimed (EnqueuesLeased): stored as a claim
		// stores it, due again when the lease ends.
		j.Expired = false
		return writeJob(tx, storedJob{Job: j, Score: j.LeaseUntil})
	}
	j.LeaseUntil = 0
	return writeJob(tx, storedJob{Job: j, Score: j.ReadyAt})
}

// checkLeasedEnqueue refuses a claimed job's enqueue into a paused queue.
func checkLeasedEnqueue(tx *bolt.Tx, jobs []store.Job) error {
	for _, j := range jobs {
		if j.Lease != "" && queuePaused(tx, j.Queue) {
			return fmt.Errorf("%w: queue %s is paused", errConflict, j.Queue)
		}
	}
	return nil
}

// Claim hands out jobs ready or lease-expired at now. Errors: ErrInvalid,
// ErrClosed, ErrUnavailable.
func (s *Store) Claim(ctx context.Context, queues []string, now, leaseUntil int64, lease string, max int) ([]store.Job, error) {
	for _, q := range queues {
		if !event.ValidName(q) {
			return nil, invalid("queue %q", q)
		}
	}
	if max <= 0 || lease == "" {
		return nil, invalid("claim of %d jobs under lease %q", max, lease)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []store.Job
	// Looking first saves a write transaction (and an fsync) per idle poll.
	if !s.anyReady(queues, now) {
		return nil, nil
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		var err error
		out, err = claimIn(tx, store.ClaimRequest{Queues: queues, Now: now, LeaseUntil: leaseUntil, Lease: lease, Max: max})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// claimIn claims in tx as Claim does.
func claimIn(tx *bolt.Tx, c store.ClaimRequest) ([]store.Job, error) {
	var out []store.Job
	for _, q := range c.Queues {
		if queuePaused(tx, q) {
			continue
		}
		_, ready, err := queueBuckets(tx, q)
		if err != nil {
			return nil, err
		}
		var ids []string
		cur := ready.Cursor()
		for k, _ := cur.First(); k != nil && len(out)+len(ids) < c.Max; k, _ = cur.Next() {
			if int64(binary.BigEndian.Uint64(k)^(1<<63)) > c.Now {
				break
			}
			ids = append(ids, string(k[8:]))
		}
		for _, id := range ids {
			j, ok, err := getJob(tx, q, id)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			if j.Lease != "" {
				j.Attempt++ // the last holder's lease ran out: a new try
				j.Expired = true
			}
			j.Lease, j.LeaseUntil, j.Score = c.Lease, c.LeaseUntil, c.LeaseUntil
			if err := writeJob(tx, j); err != nil {
				return nil, err
			}
			out = append(out, j.Job)
		}
	}
	return out, nil
}

func (s *Store) anyReady(queues []string, now int64) bool {
	found := false
	_ = s.db.View(func(tx *bolt.Tx) error {
		qs := tx.Bucket(bQueues)
		if qs == nil {
			return nil
		}
		for _, q := range queues {
			b := qs.Bucket([]byte(q))
			if b == nil || b.Bucket(kReady) == nil {
				continue
			}
			if k, _ := b.Bucket(kReady).Cursor().First(); k != nil && int64(binary.BigEndian.Uint64(k)^(1<<63)) <= now {
				found = true
				return nil
			}
		}
		return nil
	})
	return found
}

// Heartbeat extends a held lease. Errors: ErrNotFound, ErrConflict,
// ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) Heartbeat(ctx context.Context, ref store.JobAck, leaseUntil int64) (store.Job, error) {
	if !event.ValidName(ref.Queue) {
		return store.Job{}, invalid("queue %q", ref.Queue)
	}
	var out store.Job
	var sentinel error
	err := s.update(ctx, func(tx *bolt.Tx) error {
		sentinel = nil
		j, ok, err := getJob(tx, ref.Queue, ref.ID)
		if err != nil {
			return err
		}
		switch {
		case !ok:
			sentinel = fmt.Errorf("boltstore: job %s: %w", ref.ID, store.ErrNotFound)
			return nil
		case j.Lease != ref.Lease:
			sentinel = fmt.Errorf("boltstore: job %s: %w: held by another lease", ref.ID, store.ErrConflict)
			return nil
		}
		j.LeaseUntil, j.Score = leaseUntil, leaseUntil
		out = j.Job
		return writeJob(tx, j)
	})
	if err != nil {
		return store.Job{}, err
	}
	return out, sentinel
}

// Job returns a stored job. Errors: ErrNotFound, ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) Job(ctx context.Context, ref store.JobRef) (store.Job, error) {
	if !event.ValidName(ref.Queue) {
		return store.Job{}, invalid("queue %q", ref.Queue)
	}
	var j storedJob
	var ok bool
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		j, ok, err = getJob(tx, ref.Queue, ref.ID)
		return err
	})
	if err != nil {
		return store.Job{}, dbErr(err)
	}
	if !ok {
		return store.Job{}, fmt.Errorf("boltstore: job %s: %w", ref.ID, store.ErrNotFound)
	}
	return j.Job, nil
}

// checkHeld fails with a conflict unless the job a names is held by
// a.Lease.
func checkHeld(tx *bolt.Tx, a store.JobAck) error {
	held := false
	if v := jobValue(tx, a.Queue, a.ID); v != nil {
		h, err := headOf(a.ID, v)
		if err != nil {
			return err
		}
		held = h.lease == a.Lease
	}
	if !held {
		return fmt.Errorf("%w: job %s is not held by lease %q", errConflict, a.ID, a.Lease)
	}
	return nil
}
