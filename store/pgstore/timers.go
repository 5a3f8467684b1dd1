package pgstore

import (
	"context"
	"sort"

	"github.com/nqd-dev/nqd/store"
)

// DueTimers claims timers due at now by moving them to holdUntil. Errors:
// ErrClosed, ErrUnavailable.
func (s *Store) DueTimers(ctx context.Context, now, holdUntil int64, max int) ([]store.Timer, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	if max <= 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, sqlDueTimers, now, holdUntil, max)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []store.Timer
	for rows.Next() {
		var t store.Timer
		if err := rows.Scan(&t.Kind, &t.FlowName, &t.RunID, &t.Step, &t.Due); err != nil {
			return nil, dbErr(err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(err)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Due != out[b].Due {
			return out[a].Due < out[b].Due
		}
		return out[a].Name() < out[b].Name()
	})
	return out, nil
}
