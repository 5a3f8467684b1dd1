package redisstore

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
	"github.com/redis/go-redis/v9"
)

// metaFields is the record as hash fields; "" deletes a field.
func metaFields(m store.RunMeta) ([]any, error) {
	emitted := ""
	if len(m.EmittedEvents) > 0 {
		b, err := json.Marshal(m.EmittedEvents)
		if err != nil {
			return nil, err
		}
		emitted = string(b)
	}
	completed := ""
	if m.CompletedAt != 0 {
		completed = strconv.FormatInt(m.CompletedAt, 10)
	}
	return []any{
		"status", m.Status,
		"startedAt", strconv.FormatInt(m.StartedAt, 10),
		"completedAt", completed,
		"stepCount", strconv.Itoa(m.StepCount),
		"completedSteps", strconv.Itoa(m.CompletedSteps),
		"emittedEvents", emitted,
		"state", string(m.State),
	}, nil
}

// decodeMeta reads a record hash; fields another producer left out stay
// zero.
func decodeMeta(flow, run string, h map[string]string) (store.RunMeta, error) {
	m := store.RunMeta{FlowName: flow, RunID: run, Status: h["status"]}
	ints := []struct {
		field string
		to    *int64
	}{{"startedAt", &m.StartedAt}, {"completedAt", &m.CompletedAt}, {"version", &m.Version}}
	for _, f := range ints {
		if v := h[f.field]; v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return m, fmt.Errorf("redisstore: run %s: %s %q: %w", run, f.field, v, err)
			}
			*f.to = n
		}
	}
	for field, to := range map[string]*int{"stepCount": &m.StepCount, "completedSteps": &m.CompletedSteps} {
		if v := h[field]; v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return m, fmt.Errorf("redisstore: run %s: %s %q: %w", run, field, v, err)
			}
			*to = n
		}
	}
	if v := h["emittedEvents"]; v != "" {
		if err := json.Unmarshal([]byte(v), &m.EmittedEvents); err != nil {
			return m, fmt.Errorf("redisstore: run %s: emittedEvents: %w", run, err)
		}
	}
	if v := h["state"]; v != "" {
		m.State = json.RawMessage(v)
	}
	return m, nil
}

// UpdateRun applies u in one script (scripts/run_update.lua). The update
// records its answer under a token of its own for tokenWindow, so one whose
// reply was lost is sent again (see write) and answered as the first run
// was, with the jobs it claimed, rather than refused for the version it
// wrote itself. Errors: store.ErrConflict, store.ErrInvalid,
// store.ErrUnavailable, store.ErrOutcomeUnknown, store.ErrClosed.
func (s *Store) UpdateRun(ctx context.Context, u store.RunUpdate) (store.AppendResult, error) {
	if err := s.checkOpen("update run"); err != nil {
		return store.AppendResult{}, err
	}
	if err := store.CheckRunUpdate(u); err != nil {
		return store.AppendResult{}, err
	}
	m := u.Meta
	c := u.EventStream()
	sh := s.on(c.ID)
	if err := s.sameShard(sh, u); err != nil {
		return store.AppendResult{}, err
	}
	keys := make([]string, 0, 16)
	keys = append(keys, sh.metaKey(m.FlowName, m.RunID), sh.streamKey(c), sh.indexKey(store.Index{Type: c.Type}), sh.timersKey())
	keyAt := func(k string) int {
		for i, have := range keys {
			if have == k {
				return i + 1
			}
		}
		keys = append(keys, k)
		return len(keys)
	}

	fields, err := metaFields(m)
	if err != nil {
		return store.AppendResult{}, invalid("update run", "%v", err)
	}
	// Sized for the usual update at once: growing it step by step was a
	// tenth of the bytes a run allocates.
	args := make([]any, 0, 64+len(fields)+2*len(u.Events)+5*len(u.Enqueue)+2*len(u.SetTimers))
	args = append(args, sh.channel(c), c.ID, s.maxLen(c.Type), m.Version, m.Status, m.StartedAt)
	if u.Definition != nil && len(s.shards) == 1 {
		sum := sha1.Sum(u.Definition)
		args = append(args, keyAt(sh.defsKey()), m.FlowName, hex.EncodeToString(sum[:]))
	} else {
		args = append(args, 0, "", "")
	}
	// With several shards the events are reserved on their own shards
	// first (consume), not in the update's script.
	consumed := u.Consume
	if len(s.shards) > 1 {
		consumed = nil
	}
	args = append(args, len(consumed))
	for _, k := range consumed {
		args = append(args, keyAt(sh.consumedKey(k)))
	}
	args = append(args, s.kindWindow().Milliseconds())
	var leased []any
	for _, j := range u.Enqueue {
		if j.Lease != "" && !slices.Contains(leased, any(j.Queue)) {
			leased = append(leased, j.Queue)
		}
	}
	if len(leased) > 0 {
		args = append(args, keyAt(sh.pausedKey()))
	} else {
		args = append(args, 0)
	}
	args = append(args, len(leased))
	args = append(args, leased...)
	// The run leaves the index of the status its stored record names, which
	// the script reads; u.PrevStatus is only a hint of it.
	statuses := runStatuses
	for _, st := range []string{m.Status, u.PrevStatus} {
		if st != "" && !slices.Contains(statuses, st) {
			statuses = append(statuses[:len(statuses):len(statuses)], st)
		}
	}
	args = append(args, len(statuses))
	for _, st := range statuses {
		args = append(args, st, keyAt(sh.statusKey(m.FlowName, st)))
	}
	args = append(args, len(fields)/2)
	args = append(args, fields...)

	args = append(args, len(u.Events))
	bodies, err := store.EncodeEvents(u.Events)
	if err != nil {
		return store.AppendResult{}, fmt.Errorf("redisstore: update run: %w", err)
	}
	joins := make([]any, len(u.Events))
	for i, e := range u.Events {
		args = append(args, bodies[i])
		joins[i] = 0
		if ix, ok := store.JoinedIndex(e); ok {
			joins[i] = keyAt(sh.indexKey(ix))
		}
	}
	args = append(args, joins...)

	if a := u.Ack; a != nil {
		args = append(args, keyAt(sh.readyKey(a.Queue)), keyAt(sh.jobsKey(a.Queue)), a.ID, a.Lease)
	} else if h := u.Held; h != nil {
		args = append(args, 0, keyAt(sh.jobsKey(h.Queue)), h.ID, h.Lease)
	} else {
		args = append(args, 0, 0, "", "")
	}
	args = append(args, len(u.Remove))
	for _, r := range u.Remove {
		args = append(args, keyAt(sh.readyKey(r.Queue)), keyAt(sh.jobsKey(r.Queue)), r.ID)
	}
	args = append(args, len(u.Enqueue))
	for _, j := range u.Enqueue {
		v, score, err := jobValue(j)
		if err != nil {
			return store.AppendResult{}, invalid("update run", "job %s: %v", j.ID, err)
		}
		args = append(args, keyAt(sh.readyKey(j.Queue)), keyAt(sh.jobsKey(j.Queue)), j.ID, score, v)
	}
	args = append(args, len(u.ClearTimers))
	for _, t := range u.ClearTimers {
		args = append(args, t.Name())
	}
	args = append(args, len(u.SetTimers))
	for _, t := range u.SetTimers {
		args = append(args, t.Name(), t.Due)
	}
	args = append(args, keyAt(sh.expiringKey()), m.FlowName+":"+m.RunID, s.opts.Retention.ExpiresAt(m))
	if k := u.IdempotencyKey; k != "" {
		fp := store.Fingerprint(bodies)
		args = append(args, keyAt(sh.idemKey(c, k)), s.opts.IdempotencyWindow.Milliseconds(), hex.EncodeToString(fp[:]))
	} else {
		args = append(args, 0, 0, "")
	}
	if cl := u.Claim; cl != nil {
		if !validLease(cl.Lease) {
			return store.AppendResult{}, invalid("update run", "claim under lease %q", cl.Lease)
		}
		args = append(args, cl.Max, cl.Now, cl.LeaseUntil, cl.Lease, keyAt(sh.pausedKey()), len(cl.Queues))
		for _, q := range cl.Queues {
			args = append(args, keyAt(sh.readyKey(q)), keyAt(sh.jobsKey(q)), q)
		}
	} else {
		args = append(args, 0)
	}
	args = append(args, tokenWindow.Milliseconds(), keyAt(sh.newUpdateKey()))

	updated := false
	if len(s.shards) > 1 && len(u.Consume) > 0 {
		release, err := s.consume(ctx, u.Consume, m.FlowName+":"+m.RunID)
		if err != nil {
			return store.AppendResult{}, err
		}
		defer func() {
			if !updated {
				release()
			}
		}()
	}
	reply, err := s.write(ctx, sh, "update run", s.scripts.runUpdate, keys, args)
	if err != nil {
		// An update whose outcome is unknown may have run: its
		// reservations stay.
		updated = errors.Is(err, store.ErrOutcomeUnknown)
		return store.AppendResult{}, err
	}
	if code, _ := reply[0].(int64); code != 0 {
		reason, _ := reply[1].(string)
		return store.AppendResult{}, fmt.Errorf("redisstore: run %s of %s: %w: %s", m.RunID, m.FlowName, store.ErrConflict, reason)
	}
	updated = true
	var claimed []store.Job
	if u.Claim != nil {
		vals, _ := reply[len(reply)-1].([]any)
		reply = reply[:len(reply)-1]
		if claimed, err = decodeClaimed(vals); err != nil {
			return store.AppendResult{}, err
		}
	}
	if len(u.Events) == 0 {
		return store.AppendResult{Claimed: claimed}, nil
	}
	res, err := s.appendResult(c, u.Events, reply)
	res.Claimed = claimed
	return res, err
}

// RunMeta returns a run's record. Errors: store.ErrNotFound,
// store.ErrInvalid, store.ErrUnavailable, store.ErrClosed.
func (s *Store) RunMeta(ctx context.Context, flow, run string) (store.RunMeta, error) {
	if err := s.checkOpen("run"); err != nil {
		return store.RunMeta{}, err
	}
	if !event.ValidName(flow) || !event.ValidContextID(run) {
		return store.RunMeta{}, invalid("run", "run %q of flow %q", run, flow)
	}
	h, err := s.client.HGetAll(ctx, s.on(run).metaKey(flow, run)).Result()
	if err != nil {
		return store.RunMeta{}, mapErr(ctx, "run", err)
	}
	if len(h) == 0 {
		return store.RunMeta{}, fmt.Errorf("redisstore: run %s of %s: %w", run, flow, store.ErrNotFound)
	}
	return decodeMeta(flow, run, h)
}

// ListRuns pages over a flow's runs, newest first, in the order IndexList
// uses, gathered from the shards as IndexList gathers. Each record is read
// right after the page, so a run that changed status in between comes with
// its new status. Errors: store.ErrInvalid, store.ErrUnavailable,
// store.ErrClosed.
func (s *Store) ListRuns(ctx context.Context, flow, status string, offset, limit int) (store.RunPage, error) {
	if err := s.checkOpen("list runs"); err != nil {
		return store.RunPage{}, err
	}
	if !event.ValidName(flow) || (status != "" && !event.ValidName(status)) {
		return store.RunPage{}, invalid("list runs", "flow %q, status %q", flow, status)
	}
	if offset < 0 || limit < 0 {
		return store.RunPage{}, invalid("list runs", "offset %d, limit %d", offset, limit)
	}
	key := func(sh *shard) string {
		if status != "" {
			return sh.statusKey(flow, status)
		}
		return sh.indexKey(store.Index{Type: "flow", Name: flow})
	}
	ix, err := s.gatherIndex(ctx, key, offset, limit)
	if err != nil {
		return store.RunPage{}, mapErr(ctx, "list runs", err)
	}
	page := store.RunPage{Runs: []store.RunMeta{}, Total: ix.Total}
	if len(ix.Entries) == 0 {
		return page, nil
	}
	pipe := s.client.Pipeline()
	metas := make([]*redis.MapStringStringCmd, len(ix.Entries))
	for i, en := range ix.Entries {
		page.Runs = append(page.Runs, store.RunMeta{FlowName: flow, RunID: en.ID, StartedAt: en.Score})
		metas[i] = pipe.HGetAll(ctx, s.on(en.ID).metaKey(flow, en.ID))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return store.RunPage{}, mapErr(ctx, "list runs", err)
	}
	for i, cmd := range metas {
		if h := cmd.Val(); len(h) > 0 {
			m, err := decodeMeta(flow, page.Runs[i].RunID, h)
			if err != nil {
				return store.RunPage{}, err
			}
			page.Runs[i] = m
		}
	}
	return page, nil
}

// DeleteRuns removes every run of flow (streams, checkpoints, records and
// indexes) in one MULTI per shard. Jobs and timers of the removed runs are
// left to the engine, which drops them when it finds their run gone.
// Errors: store.ErrInvalid, store.ErrUnavailable, store.ErrClosed.
func (s *Store) DeleteRuns(ctx context.Context, flow string) (int, error) {
	if err := s.checkOpen("delete runs"); err != nil {
		return 0, err
	}
	if !event.ValidName(flow) {
		return 0, invalid("delete runs", "flow %q", flow)
	}
	deleted := 0
	for _, sh := range s.shards {
		index := sh.indexKey(store.Index{Type: "flow", Name: flow})
		runs, err := s.client.ZRange(ctx, index, 0, -1).Result()
		if err != nil {
			return deleted, mapErr(ctx, "delete runs", err)
		}
		_, err = s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for _, run := range runs {
				c := store.Context{Type: "flow", ID: run}
				p.Del(ctx, sh.streamKey(c), sh.checkpointsKey(c), sh.metaKey(flow, run))
				p.ZRem(ctx, sh.indexKey(store.Index{Type: "flow"}), run)
			}
			p.Del(ctx, index)
			for _, run := range runs {
				p.ZRem(ctx, sh.expiringKey(), flow+":"+run)
			}
			for _, st := range runStatuses {
				p.Del(ctx, sh.statusKey(flow, st))
			}
			return nil
		})
		if err != nil {
			return deleted, mapErr(ctx, "delete runs", err)
		}
		deleted += len(runs)
	}
	return deleted, nil
}

// sameShard checks that everything u writes lives on sh, the shard of its
// stream: the run's record, its jobs and its timers. The engine writes a
// run's own only; anything else would need a second slot.
func (s *Store) sameShard(sh *shard, u store.RunUpdate) error {
	if len(s.shards) == 1 {
		return nil
	}
	bad := func(what string) error {
		return invalid("update run", "%s is not on the shard of %s", what, u.EventStream())
	}
	if s.on(u.Meta.RunID) != sh {
		return bad("run " + u.Meta.RunID)
	}
	for _, a := range []*store.JobAck{u.Ack, u.Held} {
		if a != nil && s.jobShard(a.ID) != sh {
			return bad("job " + a.ID)
		}
	}
	for _, j := range u.Enqueue {
		if s.jobShard(j.ID) != sh {
			return bad("job " + j.ID)
		}
	}
	for _, r := range u.Remove {
		if s.jobShard(r.ID) != sh {
			return bad("job " + r.ID)
		}
	}
	for _, ts := range [][]store.Timer{u.SetTimers, u.ClearTimers} {
		for _, t := range ts {
			if s.on(t.RunID) != sh {
				return bad("timer " + t.Name())
			}
		}
	}
	return nil
}

// newUpdateKey is where a run update records its answer: a token of its own,
// new for each UpdateRun call and the same for each time it is sent.
func (sh *shard) newUpdateKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return sh.prefix + ":engine:updates:" + hex.EncodeToString(b[:])
}
