package store

import (
	"context"

	"github.com/nqd-dev/nqd/event"
)

// Trimmer drops the oldest events of a stream, so a long run keeps a bounded
// live history once its early events are archived elsewhere (package compact
// writes the archive first and trims last).
type Trimmer interface {
	// Trim removes c's events with ids below before and reports how many it
	// removed. It never removes the stream's newest event: the next append
	// takes its id after it and the context stays in its indexes. Info then
	// counts only the events left. Checkpoints are kept. Errors: ErrInvalid
	// (bad context, zero id), ErrUnavailable, ErrClosed.
	Trim(ctx context.Context, c Context, before event.ID) (int64, error)
}
