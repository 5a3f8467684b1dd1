package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// SetQueuePaused pauses or resumes queue. Errors: ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) SetQueuePaused(ctx context.Context, queue string, paused bool) error {
	if !event.ValidName(queue) {
		return invalid("queue %q", queue)
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	sql := `DELETE FROM nqd_paused_queues WHERE queue = $1`
	if paused {
		sql = `INSERT INTO nqd_paused_queues (queue) VALUES ($1) ON CONFLICT (queue) DO NOTHING`
	}
	_, err := s.pool.Exec(ctx, sql, queue)
	return dbErr(err)
}

// PausedQueues returns the paused queues, sorted. Errors: ErrClosed,
// ErrUnavailable.
func (s *Store) PausedQueues(ctx context.Context) ([]string, error) {
	return s.names(ctx, `SELECT queue FROM nqd_paused_queues ORDER BY queue`)
}

// JobQueues returns the queues that hold at least one job, sorted. Errors:
// ErrClosed, ErrUnavailable.
func (s *Store) JobQueues(ctx context.Context) ([]string, error) {
	return s.names(ctx, `SELECT DISTINCT queue FROM nqd_jobs ORDER BY queue`)
}

func (s *Store) names(ctx context.Context, sql string) ([]string, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, sql)
	if err != nil {
		return nil, dbErr(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, dbErr(err)
	}
	if out == nil {
		out = []string{}
	}
	return out, nil
}

// QueueJobs returns queue's jobs with scores in [min, max], in score order.
// Errors: ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) QueueJobs(ctx context.Context, queue string, min, max int64, offset, limit int) ([]store.Job, error) {
	if !event.ValidName(queue) {
		return nil, invalid("queue %q", queue)
	}
	if offset < 0 || limit < 0 {
		return nil, invalid("offset %d, limit %d", offset, limit)
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, sqlQueueJobs, queue, min, max, offset, limit)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	out := []store.Job{}
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, dbErr(err)
		}
		out = append(out, j)
	}
	return out, dbErr(rows.Err())
}

// QueueDepth counts queue's jobs at now. Errors: ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) QueueDepth(ctx context.Context, queue string, now int64) (store.QueueDepth, error) {
	if !event.ValidName(queue) {
		return store.QueueDepth{}, invalid("queue %q", queue)
	}
	if err := s.ready(ctx); err != nil {
		return store.QueueDepth{}, err
	}
	var d store.QueueDepth
	err := s.pool.QueryRow(ctx, `SELECT count(*),
			count(*) FILTER (WHERE score <= $2),
			count(*) FILTER (WHERE lease <> '' AND lease_until > $2)
		FROM nqd_jobs WHERE queue = $1`, queue, now).Scan(&d.Jobs, &d.Due, &d.Leased)
	return d, dbErr(err)
}
