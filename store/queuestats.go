package store

import "context"

// QueueDepth is what a job queue holds at one moment.
type QueueDepth struct {
	Jobs   int64 // every job not yet acknowledged: waiting, delayed or leased
	Due    int64 // of those, the ones a worker can claim now
	Leased int64 // of those, the ones a worker holds under a lease that has not run out
}

// QueueStats reports queue depths for monitoring.
type QueueStats interface {
	// QueueDepth counts the jobs of queue at now (epoch ms). An unknown
	// queue is empty. Errors: ErrInvalid, ErrUnavailable.
	QueueDepth(ctx context.Context, queue string, now int64) (QueueDepth, error)
}
