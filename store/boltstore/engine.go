package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// The flow engine's state lives in buckets of its own (created on first use):
//
//	flowdefs/<name>                          definition JSON
//	runs/<flow>:<run>                        store.RunMeta JSON
//	indexes/flow:<flow>:status:<status>/...  per-status run index, as the other indexes
//	queues/<queue>/jobs/<jobID>              job JSON (with its ready score)
//	queues/<queue>/ready/<score><jobID>      claimable order: ready time, or lease end once claimed
//	timers/due/<due><kind>:<flow>:<run>:<step>
//	timers/byname/<kind>:<flow>:<run>:<step> due
//
// Every engine update that appends events runs in the append's own
// transaction (appendReq.hook), so the index never disagrees with the stream.

var (
	_ store.DefinitionStore = (*Store)(nil)
	_ store.RunStore        = (*Store)(nil)
)

var (
	bFlowDefs = []byte("flowdefs")
	bRuns     = []byte("runs")
	bQueues   = []byte("queues")
	bTimers   = []byte("timers")
	kJobs     = []byte("jobs")
	kReady    = []byte("ready")
	kDue      = []byte("due")
	kByName   = []byte("byname")
)

// PutDefinition stores a flow definition. Errors: ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) PutDefinition(ctx context.Context, name string, body []byte) error {
	if !event.ValidName(name) {
		return invalid("flow name %q", name)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return dbErr(s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bFlowDefs)
		if err != nil {
			return err
		}
		return b.Put([]byte(name), bytes.Clone(body))
	}))
}

// Definition returns a stored definition. Errors: ErrNotFound, ErrInvalid,
// ErrClosed, ErrUnavailable.
func (s *Store) Definition(ctx context.Context, name string) ([]byte, error) {
	if !event.ValidName(name) {
		return nil, invalid("flow name %q", name)
	}
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bFlowDefs); b != nil {
			out = bytes.Clone(b.Get([]byte(name)))
		}
		return nil
	})
	if err != nil {
		return nil, dbErr(err)
	}
	if out == nil {
		return nil, fmt.Errorf("boltstore: flow %q: %w", name, store.ErrNotFound)
	}
	return out, nil
}

// DeleteDefinition removes a definition. Errors: ErrNotFound, ErrInvalid,
// ErrClosed, ErrUnavailable.
func (s *Store) DeleteDefinition(ctx context.Context, name string) error {
	if !event.ValidName(name) {
		return invalid("flow name %q", name)
	}
	found := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bFlowDefs)
		if b == nil || b.Get([]byte(name)) == nil {
			return nil
		}
		found = true
		return b.Delete([]byte(name))
	})
	if err != nil {
		return dbErr(err)
	}
	if !found {
		return fmt.Errorf("boltstore: flow %q: %w", name, store.ErrNotFound)
	}
	return nil
}

// Definitions returns every stored definition by name. Errors: ErrClosed,
// ErrUnavailable.
func (s *Store) Definitions(ctx context.Context) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bFlowDefs)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			out[string(k)] = bytes.Clone(v)
			return nil
		})
	})
	return out, dbErr(err)
}

func runKey(flow, run string) []byte { return []byte(flow + ":" + run) }

func statusIndex(flow, status string) store.Index {
	// The index key "flow:<flow>:status:<status>" cannot meet a real index:
	// names hold no colon.
	return store.Index{Type: "flow", Name: flow + ":status:" + status}
}

func checkUpdate(u store.RunUpdate) error {
	m := u.Meta
	if !event.ValidName(m.Flow) || !event.ValidContextID(m.Run) {
		return invalid("run %q of flow %q", m.Run, m.Flow)
	}
	if !event.ValidName(m.Status) || (u.PrevStatus != "" && !event.ValidName(u.PrevStatus)) {
		return invalid("status %q", m.Status)
	}
	for _, j := range u.Enqueue {
		if !event.ValidName(j.Queue) || j.ID == "" {
			return invalid("job %q in queue %q", j.ID, j.Queue)
		}
	}
	for _, r := range u.Remove {
		if !event.ValidName(r.Queue) {
			return invalid("queue %q", r.Queue)
		}
	}
	if u.Ack != nil && !event.ValidName(u.Ack.Queue) {
		return invalid("queue %q", u.Ack.Queue)
	}
	return nil
}

// UpdateRun applies u in one transaction; with events, it is the events'
// append transaction. Errors: ErrConflict, ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) UpdateRun(ctx context.Context, u store.RunUpdate) (store.AppendResult, error) {
	if err := checkUpdate(u); err != nil {
		return store.AppendResult{}, err
	}
	hook := func(tx *bolt.Tx) error {
		if err := applyRunUpdate(tx, u); err != nil {
			return err
		}
		return setExpiry(tx, u.Meta.Flow, u.Meta.Run, s.opts.Retention.ExpiresAt(u.Meta))
	}
	if len(u.Events) == 0 {
		if err := ctx.Err(); err != nil {
			return store.AppendResult{}, err
		}
		err := s.db.Update(hook)
		if errors.Is(err, store.ErrConflict) {
			return store.AppendResult{}, err
		}
		return store.AppendResult{}, dbErr(err)
	}
	r, err := newAppendReq(store.Context{Type: "flow", ID: u.Meta.Run}, u.Events, store.AppendOptions{})
	if err != nil {
		return store.AppendResult{}, err
	}
	r.hook = hook
	return s.submit(ctx, r)
}

var errConflict = fmt.Errorf("boltstore: %w", store.ErrConflict)

// applyRunUpdate checks everything before writing anything, so a conflict
// leaves the transaction untouched.
func applyRunUpdate(tx *bolt.Tx, u store.RunUpdate) error {
	runs, err := tx.CreateBucketIfNotExists(bRuns)
	if err != nil {
		return err
	}
	rk := runKey(u.Meta.Flow, u.Meta.Run)
	var cur store.RunMeta
	if v := runs.Get(rk); v != nil {
		if err := json.Unmarshal(v, &cur); err != nil {
			return fmt.Errorf("run %s: %w", rk, err)
		}
	}
	if cur.Version != u.Meta.Version {
		return fmt.Errorf("%w: run %s is at version %d, not %d", errConflict, rk, cur.Version, u.Meta.Version)
	}
	if err := checkUnconsumed(tx, u.Consume); err != nil {
		return err
	}
	if a := u.Ack; a != nil {
		j, ok, err := getJob(tx, a.Queue, a.ID)
		if err != nil {
			return err
		}
		if !ok || j.Lease != a.Lease {
			return fmt.Errorf("%w: job %s is not held by lease %q", errConflict, a.ID, a.Lease)
		}
		if err := deleteJob(tx, a.Queue, a.ID); err != nil {
			return err
		}
	}

	if err := markConsumed(tx, u.Meta.Run, u.Consume); err != nil {
		return err
	}
	m := u.Meta
	m.Version = cur.Version + 1
	body, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := runs.Put(rk, body); err != nil {
		return err
	}
	if cur.Version == 0 || cur.Status != m.Status {
		if cur.Version > 0 {
			if err := indexRemove(tx, statusIndex(m.Flow, cur.Status), m.Run); err != nil {
				return err
			}
		}
		if err := indexAdd(tx, statusIndex(m.Flow, m.Status), m.Run, m.StartedAt); err != nil {
			return err
		}
	}
	for _, r := range u.Remove {
		if err := deleteJob(tx, r.Queue, r.ID); err != nil {
			return err
		}
	}
	for _, j := range u.Enqueue {
		if err := putJob(tx, j); err != nil {
			return err
		}
	}
	for _, t := range u.ClearTimers {
		if err := clearTimer(tx, timerName(t)); err != nil {
			return err
		}
	}
	for _, t := range u.SetTimers {
		if err := setTimer(tx, timerName(t), t.Due); err != nil {
			return err
		}
	}
	return nil
}

func indexRemove(tx *bolt.Tx, ix store.Index, id string) error {
	b := tx.Bucket(bIndexes).Bucket(indexKey(ix))
	if b == nil {
		return nil
	}
	members := b.Bucket(kMembers)
	if members == nil {
		return nil
	}
	v := members.Get([]byte(id))
	if v == nil {
		return nil
	}
	if err := b.Bucket(kOrder).Delete(orderKey(int64(getUint64(v)), id)); err != nil {
		return err
	}
	if err := members.Delete([]byte(id)); err != nil {
		return err
	}
	return b.Put(kCount, putUint64(getUint64(b.Get(kCount))-1))
}

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

func getJob(tx *bolt.Tx, queue, id string) (storedJob, bool, error) {
	var j storedJob
	qs := tx.Bucket(bQueues)
	if qs == nil {
		return j, false, nil
	}
	q := qs.Bucket([]byte(queue))
	if q == nil || q.Bucket(kJobs) == nil {
		return j, false, nil
	}
	v := q.Bucket(kJobs).Get([]byte(id))
	if v == nil {
		return j, false, nil
	}
	if err := json.Unmarshal(v, &j); err != nil {
		return j, false, fmt.Errorf("job %s: %w", id, err)
	}
	j.ReadyAt = j.Score
	return j, true, nil
}

func deleteJob(tx *bolt.Tx, queue, id string) error {
	j, ok, err := getJob(tx, queue, id)
	if err != nil || !ok {
		return err
	}
	jobs, ready, err := queueBuckets(tx, queue)
	if err != nil {
		return err
	}
	if err := ready.Delete(readyKey(j.Score, id)); err != nil {
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
	j.Lease, j.LeaseUntil = "", 0
	return writeJob(tx, storedJob{Job: j, Score: j.ReadyAt})
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
	err := s.db.Update(func(tx *bolt.Tx) error {
		out = out[:0]
		for _, q := range queues {
			if queuePaused(tx, q) {
				continue
			}
			_, ready, err := queueBuckets(tx, q)
			if err != nil {
				return err
			}
			var ids []string
			cur := ready.Cursor()
			for k, _ := cur.First(); k != nil && len(out)+len(ids) < max; k, _ = cur.Next() {
				if int64(binary.BigEndian.Uint64(k)^(1<<63)) > now {
					break
				}
				ids = append(ids, string(k[8:]))
			}
			for _, id := range ids {
				j, ok, err := getJob(tx, q, id)
				if err != nil {
					return err
				}
				if !ok {
					continue
				}
				if j.Lease != "" {
					j.Attempt++ // the last holder's lease ran out: a new try
					j.Expired = true
				}
				j.Lease, j.LeaseUntil, j.Score = lease, leaseUntil, leaseUntil
				if err := writeJob(tx, j); err != nil {
					return err
				}
				out = append(out, j.Job)
			}
		}
		return nil
	})
	return out, dbErr(err)
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
	err := s.db.Update(func(tx *bolt.Tx) error {
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
		return store.Job{}, dbErr(err)
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

func timerName(t store.Timer) string { return t.Kind + ":" + t.Flow + ":" + t.Run + ":" + t.Step }

func parseTimer(name string, due int64) (store.Timer, bool) {
	p := strings.SplitN(name, ":", 4)
	if len(p) != 4 {
		return store.Timer{}, false
	}
	return store.Timer{Kind: p[0], Flow: p[1], Run: p[2], Step: p[3], Due: due}, true
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

// RunMeta returns a run's record. Errors: ErrNotFound, ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) RunMeta(ctx context.Context, flow, run string) (store.RunMeta, error) {
	if !event.ValidName(flow) || !event.ValidContextID(run) {
		return store.RunMeta{}, invalid("run %q of flow %q", run, flow)
	}
	var m store.RunMeta
	found := false
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bRuns)
		if b == nil {
			return nil
		}
		v := b.Get(runKey(flow, run))
		if v == nil {
			return nil
		}
		found = true
		return json.Unmarshal(v, &m)
	})
	if err != nil {
		return store.RunMeta{}, dbErr(err)
	}
	if !found {
		return store.RunMeta{}, fmt.Errorf("boltstore: run %s of %s: %w", run, flow, store.ErrNotFound)
	}
	return m, nil
}

// ListRuns pages over a flow's runs. Errors: ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) ListRuns(ctx context.Context, flow, status string, offset, limit int) (store.RunPage, error) {
	if !event.ValidName(flow) || (status != "" && !event.ValidName(status)) {
		return store.RunPage{}, invalid("flow %q, status %q", flow, status)
	}
	if offset < 0 || limit < 0 {
		return store.RunPage{}, invalid("offset %d, limit %d", offset, limit)
	}
	ix := store.Index{Type: "flow", Name: flow}
	if status != "" {
		ix = statusIndex(flow, status)
	}
	// The status index name holds colons, which IndexList refuses from
	// clients, so this reads it through the same view directly.
	page := store.RunPage{Runs: []store.RunMeta{}}
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bIndexes).Bucket(indexKey(ix))
		if b == nil {
			return nil
		}
		page.Total = int64(getUint64(b.Get(kCount)))
		order := b.Bucket(kOrder)
		if order == nil {
			return nil
		}
		runs := tx.Bucket(bRuns)
		cur := order.Cursor()
		k, _ := cur.First()
		for i := 0; i < offset && k != nil; i++ {
			k, _ = cur.Next()
		}
		for ; k != nil && len(page.Runs) < limit; k, _ = cur.Next() {
			e := parseOrderKey(k)
			m := store.RunMeta{Flow: flow, Run: e.ID, StartedAt: e.Score}
			if runs != nil {
				if v := runs.Get(runKey(flow, e.ID)); v != nil {
					if err := json.Unmarshal(v, &m); err != nil {
						return err
					}
				}
			}
			page.Runs = append(page.Runs, m)
		}
		return nil
	})
	if err != nil {
		return store.RunPage{}, dbErr(err)
	}
	return page, nil
}

// DeleteRuns removes every run of flow. Errors: ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) DeleteRuns(ctx context.Context, flow string) (int, error) {
	if !event.ValidName(flow) {
		return 0, invalid("flow %q", flow)
	}
	n := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		ix := tx.Bucket(bIndexes).Bucket(indexKey(store.Index{Type: "flow", Name: flow}))
		var ids []string
		if ix != nil && ix.Bucket(kMembers) != nil {
			_ = ix.Bucket(kMembers).ForEach(func(k, _ []byte) error {
				ids = append(ids, string(k))
				return nil
			})
		}
		sort.Strings(ids)
		runs := tx.Bucket(bRuns)
		for _, id := range ids {
			c := contextKey(store.Context{Type: "flow", ID: id})
			if tx.Bucket(bStreams).Bucket(c) != nil {
				if err := tx.Bucket(bStreams).DeleteBucket(c); err != nil {
					return err
				}
			}
			if err := tx.Bucket(bLengths).Delete(c); err != nil {
				return err
			}
			if err := indexRemove(tx, store.Index{Type: "flow"}, id); err != nil {
				return err
			}
			if runs != nil {
				if v := runs.Get(runKey(flow, id)); v != nil {
					var m store.RunMeta
					if json.Unmarshal(v, &m) == nil {
						if err := indexRemove(tx, statusIndex(flow, m.Status), id); err != nil {
							return err
						}
					}
					if err := runs.Delete(runKey(flow, id)); err != nil {
						return err
					}
				}
			}
			if err := setExpiry(tx, flow, id, 0); err != nil {
				return err
			}
			n++
		}
		if ix != nil {
			return tx.Bucket(bIndexes).DeleteBucket(indexKey(store.Index{Type: "flow", Name: flow}))
		}
		return nil
	})
	if err != nil {
		return 0, dbErr(err)
	}
	return n, nil
}
