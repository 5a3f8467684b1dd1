package store

import (
	"context"

	"github.com/nqd-dev/nqd/event"
)

// Restorer brings an archived context back into the store, ids and all, so
// that links to its events (lastEventId, time travel points) stay valid.
type Restorer interface {
	// Restore writes evs, whose ids are set and strictly increasing, as c's
	// whole stream, maintains the indexes as Append would, and stores
	// record as the run's record when it is not nil (c must then be the
	// run's flow context). All of it is written in one atomic step, or
	// nothing. The events are not published: nothing can be subscribed to
	// a run that was not there. Errors: ErrConflict (c's stream or the run
	// record exists: nothing was written), ErrInvalid, ErrUnavailable,
	// ErrClosed.
	Restore(ctx context.Context, c Context, evs []event.Event, record *RunMeta) error
}
