package boltstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/jsonscan"
	"github.com/nqd-dev/nqd/store"
	bolt "go.etcd.io/bbolt"
)

func runKey(flow, run string) []byte { return []byte(flow + ":" + run) }

func statusIndex(flow, status string) store.Index {
	// The index key "flow:<flow>:status:<status>" cannot meet a real index:
	// names hold no colon.
	return store.Index{Type: "flow", Name: flow + ":status:" + status}
}

// UpdateRun applies u in one transaction; with events, it is the events'
// append transaction. Errors: ErrConflict, ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) UpdateRun(ctx context.Context, u store.RunUpdate) (store.AppendResult, error) {
	if err := store.CheckRunUpdate(u); err != nil {
		return store.AppendResult{}, err
	}
	// The record is encoded before the transaction: the version it gets
	// is the one the update read, plus one, or the update is refused.
	next := u.Meta
	next.Version++
	body, err := json.Marshal(next)
	if err != nil {
		return store.AppendResult{}, err
	}
	var claimed []store.Job
	hook := func(tx *bolt.Tx) error {
		claimed = nil
		if err := applyRunUpdate(tx, u, body); err != nil {
			return err
		}
		if err := setExpiry(tx, u.Meta.FlowName, u.Meta.RunID, s.opts.Retention.ExpiresAt(u.Meta)); err != nil {
			return err
		}
		if u.Claim != nil {
			var err error
			claimed, err = claimIn(tx, *u.Claim)
			return err
		}
		return nil
	}
	if len(u.Events) == 0 {
		if err := s.update(ctx, hook); err != nil {
			return store.AppendResult{}, err
		}
		return store.AppendResult{Claimed: claimed}, nil
	}
	r, err := newAppendReq(u.EventStream(), u.Events, store.AppendOptions{IdempotencyKey: u.IdempotencyKey})
	if err != nil {
		return store.AppendResult{}, err
	}
	r.hook, r.remember = hook, true
	res, err := s.submit(ctx, r)
	if err == nil {
		res.Claimed = claimed
	}
	return res, err
}

var errConflict = fmt.Errorf("boltstore: %w", store.ErrConflict)

// applyRunUpdate checks everything before writing anything, so a conflict
// leaves the transaction untouched.
func applyRunUpdate(tx *bolt.Tx, u store.RunUpdate, body []byte) error {
	runs, err := tx.CreateBucketIfNotExists(bRuns)
	if err != nil {
		return err
	}
	rk := runKey(u.Meta.FlowName, u.Meta.RunID)
	cur, err := runHeadOf(rk, runs.Get(rk))
	if err != nil {
		return err
	}
	if cur.Version != u.Meta.Version {
		return fmt.Errorf("%w: run %s is at version %d, not %d", errConflict, rk, cur.Version, u.Meta.Version)
	}
	if err := checkUnconsumed(tx, u.Consume); err != nil {
		return err
	}
	if err := checkLeasedEnqueue(tx, u.Enqueue); err != nil {
		return err
	}
	for _, a := range []*store.JobAck{u.Ack, u.Held} {
		if a == nil {
			continue
		}
		if err := checkHeld(tx, *a); err != nil {
			return err
		}
	}
	if a := u.Ack; a != nil {
		if err := deleteJob(tx, a.Queue, a.ID); err != nil {
			return err
		}
	}

	if err := markConsumed(tx, u.Meta.RunID, u.Consume); err != nil {
		return err
	}
	m := u.Meta
	if err := runs.Put(rk, body); err != nil {
		return err
	}
	if cur.Version == 0 || cur.Status != m.Status {
		if cur.Version > 0 {
			if err := indexRemove(tx, statusIndex(m.FlowName, cur.Status), m.RunID); err != nil {
				return err
			}
		}
		if err := indexAdd(tx, statusIndex(m.FlowName, m.Status), m.RunID, m.StartedAt); err != nil {
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
		if err := clearTimer(tx, t.Name()); err != nil {
			return err
		}
	}
	for _, t := range u.SetTimers {
		if err := setTimer(tx, t.Name(), t.Due); err != nil {
			return err
		}
	}
	return nil
}

// runHead is what an update reads of a run's stored record.
type runHead struct {
	Version int64  `json:"version"`
	Status  string `json:"status"`
}

// runHeadOf scans a stored run record (nil: none yet) for its head, without
// decoding the engine's state and the rest, on the path of every update.
func runHeadOf(rk, v []byte) (runHead, error) {
	var h runHead
	if v == nil {
		return h, nil
	}
	ok := jsonscan.Fields(v, []string{"version", "status"}, func(i int, val []byte) (ok bool) {
		if i == 0 {
			var n int
			n, ok = jsonscan.Int(val)
			h.Version = int64(n)
			return ok
		}
		h.Status, ok = jsonscan.String(val)
		return ok
	})
	if ok {
		return h, nil
	}
	h = runHead{} // whatever the scan does not take, encoding/json reads
	if err := json.Unmarshal(v, &h); err != nil {
		return h, fmt.Errorf("run %s: %w", rk, err)
	}
	return h, nil
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
		runs := tx.Bucket(bRuns)
		var err error
		page.Total, err = indexPage(tx, ix, offset, func(e store.IndexEntry) (bool, error) {
			if len(page.Runs) >= limit {
				return false, nil
			}
			m := store.RunMeta{FlowName: flow, RunID: e.ID, StartedAt: e.Score}
			if runs != nil {
				if v := runs.Get(runKey(flow, e.ID)); v != nil {
					if err := json.Unmarshal(v, &m); err != nil {
						return false, err
					}
				}
			}
			page.Runs = append(page.Runs, m)
			return len(page.Runs) < limit, nil
		})
		return err
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
		ix := store.Index{Type: "flow", Name: flow}
		var ids []string
		indexMembers(tx, ix, func(id string) { ids = append(ids, id) })
		runs := tx.Bucket(bRuns)
		for _, id := range ids {
			c := contextKey(store.Context{Type: "flow", ID: id})
			if tx.Bucket(bStreams).Bucket(c) != nil {
				if err := tx.Bucket(bStreams).DeleteBucket(c); err != nil {
					return err
				}
			}
			if err := dropStreamLength(tx, c); err != nil {
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
		return indexDrop(tx, ix)
	})
	if err != nil {
		return 0, dbErr(err)
	}
	return n, nil
}
