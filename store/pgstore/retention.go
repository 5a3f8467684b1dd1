package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// A run's due time is the expires_at column of its record, written by the
// same statement as the record, so it follows every status change.

// ExpiredRuns returns up to max runs due at now, earliest first. Errors:
// ErrClosed, ErrUnavailable.
func (s *Store) ExpiredRuns(ctx context.Context, now int64, max int) ([]store.ExpiredRun, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	if max <= 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT flow, run, expires_at FROM nqd_runs
		WHERE expires_at <= $1 ORDER BY expires_at, flow, run LIMIT $2`, now, max)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []store.ExpiredRun
	for rows.Next() {
		var r store.ExpiredRun
		if err := rows.Scan(&r.FlowName, &r.RunID, &r.Due); err != nil {
			return nil, dbErr(err)
		}
		out = append(out, r)
	}
	return out, dbErr(rows.Err())
}

// DeleteExpiredRun removes a due run. Errors: ErrConflict (not due at now),
// ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) DeleteExpiredRun(ctx context.Context, flow, run string, now int64) error {
	if !event.ValidName(flow) || !event.ValidContextID(run) {
		return invalid("run %q of flow %q", run, flow)
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		// The row lock keeps a concurrent update from resuming the run
		// between this check and the delete.
		var due bool
		err := tx.QueryRow(ctx, `SELECT expires_at <= $3 FROM nqd_runs
			WHERE flow = $1 AND run = $2 AND expires_at IS NOT NULL FOR UPDATE`, flow, run, now).Scan(&due)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !due) {
			return fmt.Errorf("%w: run %s of %s is not due", errConflict, run, flow)
		}
		if err != nil {
			return err
		}
		if err := deleteRun(ctx, tx, flow, run); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM nqd_index WHERE ix = $1 AND member = $2`,
			indexKey(store.Index{Type: "flow", Name: flow}), run)
		return err
	})
	return dbErr(err)
}
