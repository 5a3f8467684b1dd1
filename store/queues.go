package store

import "context"

// QueueStore is what the queue views and the pause switch need beyond
// RunStore: which queues are paused, which hold jobs, and a queue's jobs in
// order. A paused queue's Claim hands out nothing, decided in the same
// atomic step as the claim, so a pause that returned holds on every
// instance sharing the store and survives restarts.
type QueueStore interface {
	QueueStats
	// SetQueuePaused pauses or resumes queue. Pausing a paused queue (or
	// resuming a running one) changes nothing. Errors: ErrInvalid,
	// ErrUnavailable.
	SetQueuePaused(ctx context.Context, queue string, paused bool) error
	// PausedQueues returns the paused queues, sorted. Errors:
	// ErrUnavailable.
	PausedQueues(ctx context.Context) ([]string, error)
	// JobQueues returns the queues that hold at least one job, sorted.
	// Errors: ErrUnavailable.
	JobQueues(ctx context.Context) ([]string, error)
	// QueueJobs returns, in score order (ready time, or lease end once
	// claimed), the jobs of queue whose score is within [min, max], skipping
	// offset of them and returning at most limit. Each job's ReadyAt is its
	// score. Errors: ErrInvalid, ErrUnavailable.
	QueueJobs(ctx context.Context, queue string, min, max int64, offset, limit int) ([]Job, error)
}
