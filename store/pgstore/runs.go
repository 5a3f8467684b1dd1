package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// UpdateRun applies u in one transaction and one round trip: a pipeline of
// the version check, the ack, the consumed kind entries, the events with
// their indexes (nqd_append), the jobs and the timers, which the server runs
// as one implicit transaction. A failed check raises (nqd_require), so
// nothing of the update is written. Errors: ErrConflict, ErrInvalid,
// ErrOutcomeUnknown, ErrClosed, ErrUnavailable.
func (s *Store) UpdateRun(ctx context.Context, u store.RunUpdate) (store.AppendResult, error) {
	if err := store.CheckRunUpdate(u); err != nil {
		return store.AppendResult{}, err
	}
	var b *batch
	if len(u.Events) > 0 {
		var err error
		if b, err = newBatch(u.EventStream(), u.Events, ""); err != nil {
			return store.AppendResult{}, err
		}
	}
	if err := s.ready(ctx); err != nil {
		return store.AppendResult{}, err
	}
	wb := &pgx.Batch{}
	if err := s.queueRun(wb, u); err != nil {
		return store.AppendResult{}, err
	}
	var res store.AppendResult
	if b != nil {
		// The run's own lifecycle events are not recorded by kind.
		wb.Queue(sqlAppend, s.appendArgs(b, false)...).Query(func(rows pgx.Rows) error {
			var err error
			res, err = scanAppend(rows, b)
			return err
		})
		if k := u.IdempotencyKey; k != "" {
			fp := store.Fingerprint(b.bodies)
			wb.Queue(sqlIdempotencyRemember, b.ck, k, len(b.bodies), s.opts.IdempotencyWindow.Milliseconds(), fp[:])
		}
	}
	queueJobsAndTimers(wb, u)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return store.AppendResult{}, dbErr(err)
	}
	defer conn.Release()
	if err := conn.SendBatch(ctx, wb).Close(); err != nil {
		return store.AppendResult{}, callErr(fmt.Sprintf("update of run %s of %s", u.Meta.RunID, u.Meta.FlowName), err)
	}
	s.appended(res)
	return res, nil
}

// queueRun queues the checks and writes of the run record, the ack and the
// consumed kind entries; a failed check raises, and the server skips the
// rest of the pipeline.
func (s *Store) queueRun(wb *pgx.Batch, u store.RunUpdate) error {
	m := u.Meta
	m.Version = u.Meta.Version + 1
	body, err := json.Marshal(m)
	if err != nil {
		return invalid("run record: %v", err)
	}
	var expires *int64
	if at := s.opts.Retention.ExpiresAt(m); at > 0 {
		expires = &at
	}
	sql := sqlRunUpdateRequired
	if u.Meta.Version == 0 {
		sql = sqlRunCreateRequired
	}
	if u.Definition != nil {
		// Queued first, so a stale definition fails the batch before it
		// writes anything; see Features.
		wb.Queue(sqlDefinitionIs, m.FlowName, u.Definition, fmt.Sprintf("definition of %s changed", m.FlowName))
	}
	wb.Queue(sql, m.FlowName, m.RunID, m.Status, m.StartedAt, m.Version, expires, body,
		fmt.Sprintf("run %s of %s is not at version %d", m.RunID, m.FlowName, u.Meta.Version))
	if a := u.Ack; a != nil {
		wb.Queue(sqlAck, a.Queue, a.ID, a.Lease, fmt.Sprintf("job %s is not held by lease %q", a.ID, a.Lease))
	}
	if h := u.Held; h != nil {
		wb.Queue(sqlHeld, h.Queue, h.ID, h.Lease, fmt.Sprintf("job %s is not held by lease %q", h.ID, h.Lease))
	}
	for _, r := range u.Consume {
		ms, seq := pgID(r.Seq)
		wb.Queue(sqlConsume, r.Kind, ms, seq, m.RunID, fmt.Sprintf("event %s %v already consumed", r.Kind, r.Seq))
	}
	return nil
}

// queueJobsAndTimers queues the job and timer writes of u.
func queueJobsAndTimers(wb *pgx.Batch, u store.RunUpdate) {
	for _, r := range u.Remove {
		wb.Queue(`DELETE FROM nqd_jobs WHERE queue = $1 AND id = $2`, r.Queue, r.ID)
	}
	for _, j := range u.Enqueue {
		wb.Queue(sqlJobPut, j.Queue, j.ID, j.FlowName, j.RunID, j.Step, []byte(j.Input), max(j.Attempt, 1), j.ReadyAt)
	}
	for _, t := range u.ClearTimers {
		wb.Queue(`DELETE FROM nqd_timers WHERE kind = $1 AND flow = $2 AND run = $3 AND step = $4`,
			t.Kind, t.FlowName, t.RunID, t.Step)
	}
	for _, t := range u.SetTimers {
		wb.Queue(sqlTimerSet, t.Kind, t.FlowName, t.RunID, t.Step, t.Due)
	}
}

// RunMeta returns a run's record. Errors: ErrNotFound, ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) RunMeta(ctx context.Context, flow, run string) (store.RunMeta, error) {
	if !event.ValidName(flow) || !event.ValidContextID(run) {
		return store.RunMeta{}, invalid("run %q of flow %q", run, flow)
	}
	if err := s.ready(ctx); err != nil {
		return store.RunMeta{}, err
	}
	var body []byte
	err := s.pool.QueryRow(ctx, `SELECT meta FROM nqd_runs WHERE flow = $1 AND run = $2`, flow, run).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.RunMeta{}, fmt.Errorf("pgstore: run %s of %s: %w", run, flow, store.ErrNotFound)
	}
	if err != nil {
		return store.RunMeta{}, dbErr(err)
	}
	var m store.RunMeta
	if err := json.Unmarshal(body, &m); err != nil {
		return store.RunMeta{}, fmt.Errorf("pgstore: run %s of %s: %w", run, flow, err)
	}
	return m, nil
}

// ListRuns pages over a flow's runs: the flow's run index, or with a status
// the records of that status, newest first. Errors: ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) ListRuns(ctx context.Context, flow, status string, offset, limit int) (store.RunPage, error) {
	if !event.ValidName(flow) || (status != "" && !event.ValidName(status)) {
		return store.RunPage{}, invalid("flow %q, status %q", flow, status)
	}
	if offset < 0 || limit < 0 {
		return store.RunPage{}, invalid("offset %d, limit %d", offset, limit)
	}
	if err := s.ready(ctx); err != nil {
		return store.RunPage{}, err
	}
	page := store.RunPage{Runs: []store.RunMeta{}}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		listSQL, arg := sqlRunsList, indexKey(store.Index{Type: "flow", Name: flow})
		var count pgx.Row
		if status == "" {
			count = tx.QueryRow(ctx, sqlRunsCount, arg)
		} else {
			listSQL, arg = sqlRunsListStatus, status
			count = tx.QueryRow(ctx, sqlRunsCountStatus, flow, status)
		}
		if err := count.Scan(&page.Total); err != nil {
			return err
		}
		if limit == 0 {
			return nil
		}
		rows, err := tx.Query(ctx, listSQL, flow, arg, offset, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var run string
			var score int64
			var body []byte
			if err := rows.Scan(&run, &score, &body); err != nil {
				return err
			}
			m := store.RunMeta{FlowName: flow, RunID: run, StartedAt: score}
			if body != nil {
				if err := json.Unmarshal(body, &m); err != nil {
					return fmt.Errorf("run %s of %s: %w", run, flow, err)
				}
			}
			page.Runs = append(page.Runs, m)
		}
		return rows.Err()
	})
	if err != nil {
		return store.RunPage{}, dbErr(err)
	}
	return page, nil
}

// DeleteRuns removes every run of flow: streams, checkpoints, records and
// index entries. Errors: ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) DeleteRuns(ctx context.Context, flow string) (int, error) {
	if !event.ValidName(flow) {
		return 0, invalid("flow %q", flow)
	}
	if err := s.ready(ctx); err != nil {
		return 0, err
	}
	var n int
	err := s.write(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT member FROM nqd_index WHERE ix = $1 ORDER BY member`, indexKey(store.Index{Type: "flow", Name: flow}))
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := deleteRun(ctx, tx, flow, id); err != nil {
				return err
			}
		}
		// Records of runs that never reached the flow's index go too.
		if _, err := tx.Exec(ctx, `DELETE FROM nqd_runs WHERE flow = $1`, flow); err != nil {
			return err
		}
		n = len(ids)
		_, err = tx.Exec(ctx, `DELETE FROM nqd_index WHERE ix = $1`, indexKey(store.Index{Type: "flow", Name: flow}))
		return err
	})
	if err != nil {
		return 0, dbErr(err)
	}
	return n, nil
}

// deleteRun removes one run's stream, checkpoints, record and its entry in
// the index of flow contexts; the caller removes the flow's index entry.
func deleteRun(ctx context.Context, tx pgx.Tx, flow, run string) error {
	ck := contextKey(store.Context{Type: "flow", ID: run})
	for _, q := range []string{
		`DELETE FROM nqd_events WHERE ctx = $1`,
		`DELETE FROM nqd_streams WHERE ctx = $1`,
		`DELETE FROM nqd_checkpoints WHERE ctx = $1`,
		`DELETE FROM nqd_idempotency WHERE ctx = $1`,
	} {
		if _, err := tx.Exec(ctx, q, ck); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM nqd_index WHERE ix = 'flow' AND member = $1`, run); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `DELETE FROM nqd_runs WHERE flow = $1 AND run = $2`, flow, run)
	return err
}
