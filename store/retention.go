package store

import (
	"context"
	"time"
)

// Retention is how long a finished run is kept after it finished, by its
// terminal status (e.g. 7 days for completed runs, 30 for failed ones, so
// failures stay around for debugging). Zero keeps runs of that status
// forever; running and awaiting runs are never due.
type Retention struct {
	Completed time.Duration
	Failed    time.Duration
	Cancelled time.Duration
}

// ExpiresAt is when m's retention ends, in epoch ms, or 0 when m is kept
// forever. The time comes from the record (CompletedAt, else StartedAt), never
// from a clock, so every instance computes the same due time.
func (r Retention) ExpiresAt(m RunMeta) int64 {
	var ttl time.Duration
	switch m.Status {
	case RunCompleted:
		ttl = r.Completed
	case RunFailed:
		ttl = r.Failed
	case RunCancelled:
		ttl = r.Cancelled
	}
	if ttl <= 0 {
		return 0
	}
	return max(m.CompletedAt, m.StartedAt) + ttl.Milliseconds()
}

// ExpiredRun names a run whose retention has ended.
type ExpiredRun struct {
	FlowName string
	RunID    string
	Due      int64 // epoch ms
}

// Retainer expires finished runs. A backend with a Retention records a run's
// due time in the same atomic step as the update that makes it terminal, and
// forgets it when the run leaves a terminal status; the reaper (package
// retention) asks for due runs, archives them if configured, then deletes
// them.
type Retainer interface {
	// ExpiredRuns returns up to max runs due at now, earliest first.
	// Errors: ErrUnavailable, ErrClosed.
	ExpiredRuns(ctx context.Context, now int64, max int) ([]ExpiredRun, error)
	// DeleteExpiredRun removes a due run: its stream, checkpoints, record,
	// its entries in every index and its due time, atomically. Errors:
	// ErrConflict (the run is not due at now, e.g. it was resumed or
	// already deleted: nothing was removed), ErrInvalid, ErrUnavailable,
	// ErrClosed.
	DeleteExpiredRun(ctx context.Context, flow, run string, now int64) error
}
