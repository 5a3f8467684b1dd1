package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Claim hands out jobs ready or lease-expired at now, skipping rows another
// claim holds. Errors: ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) Claim(ctx context.Context, queues []string, now, leaseUntil int64, lease string, max int) ([]store.Job, error) {
	for _, q := range queues {
		if !event.ValidName(q) {
			return nil, invalid("queue %q", q)
		}
	}
	if max <= 0 || lease == "" {
		return nil, invalid("claim of %d jobs under lease %q", max, lease)
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	var out []store.Job
	err := s.write(ctx, func(tx pgx.Tx) error {
		out = out[:0]
		for _, q := range queues {
			if len(out) == max {
				break
			}
			rows, err := tx.Query(ctx, sqlClaim, q, now, max-len(out), lease, leaseUntil)
			if err != nil {
				return err
			}
			type claimed struct {
				job   store.Job
				score int64
			}
			var got []claimed
			for rows.Next() {
				var c claimed
				var input []byte
				j := &c.job
				if err := rows.Scan(&j.ID, &j.FlowName, &j.RunID, &j.Step, &input, &j.Attempt, &j.Lease, &j.LeaseUntil, &j.Expired, &c.score); err != nil {
					rows.Close()
					return err
				}
				// ReadyAt is the score the job had when it was taken, as on
				// the other stores.
				j.Queue, j.ReadyAt = q, c.score
				if input != nil {
					j.Input = json.RawMessage(input)
				}
				got = append(got, c)
			}
			if err := rows.Err(); err != nil {
				return err
			}
			// RETURNING keeps no order; the queue's order is its score.
			sort.Slice(got, func(a, b int) bool {
				if got[a].score != got[b].score {
					return got[a].score < got[b].score
				}
				return got[a].job.ID < got[b].job.ID
			})
			for _, c := range got {
				out = append(out, c.job)
			}
		}
		return nil
	})
	if err != nil {
		return nil, dbErr(err)
	}
	return out, nil
}

// Heartbeat extends a held lease. Errors: ErrNotFound, ErrConflict,
// ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) Heartbeat(ctx context.Context, ref store.JobAck, leaseUntil int64) (store.Job, error) {
	if !event.ValidName(ref.Queue) {
		return store.Job{}, invalid("queue %q", ref.Queue)
	}
	if err := s.ready(ctx); err != nil {
		return store.Job{}, err
	}
	var out store.Job
	err := s.write(ctx, func(tx pgx.Tx) error {
		j, err := getJob(ctx, tx, ref.Queue, ref.ID, true)
		if err != nil {
			return err
		}
		if j.Lease != ref.Lease {
			return fmt.Errorf("pgstore: job %s: %w: held by another lease", ref.ID, store.ErrConflict)
		}
		if _, err := tx.Exec(ctx, `UPDATE nqd_jobs SET lease_until = $3, score = $3 WHERE queue = $1 AND id = $2`,
			ref.Queue, ref.ID, leaseUntil); err != nil {
			return err
		}
		j.LeaseUntil = leaseUntil
		out = j
		return nil
	})
	if err != nil {
		return store.Job{}, dbErr(err)
	}
	return out, nil
}

// Job returns a stored job. Errors: ErrNotFound, ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) Job(ctx context.Context, ref store.JobRef) (store.Job, error) {
	if !event.ValidName(ref.Queue) {
		return store.Job{}, invalid("queue %q", ref.Queue)
	}
	if err := s.ready(ctx); err != nil {
		return store.Job{}, err
	}
	j, err := getJob(ctx, s.pool, ref.Queue, ref.ID, false)
	return j, dbErr(err)
}

func getJob(ctx context.Context, db querier, queue, id string, lock bool) (store.Job, error) {
	sql := sqlJobGet
	if lock {
		sql += " FOR UPDATE"
	}
	j, err := scanJob(db.QueryRow(ctx, sql, queue, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Job{}, fmt.Errorf("pgstore: job %s: %w", id, store.ErrNotFound)
	}
	return j, err
}

// scanJob reads a row of the columns sqlJobGet selects.
func scanJob(row pgx.Row) (store.Job, error) {
	var j store.Job
	var input []byte
	if err := row.Scan(&j.Queue, &j.ID, &j.FlowName, &j.RunID, &j.Step, &input, &j.Attempt, &j.ReadyAt, &j.Lease, &j.LeaseUntil); err != nil {
		return store.Job{}, err
	}
	if input != nil {
		j.Input = json.RawMessage(input)
	}
	return j, nil
}
