package store

import (
	"context"
	"fmt"

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

// CheckRestore checks a restore before anything is written, by the rules
// every backend shares, and returns the events' stored bodies. Errors wrap
// ErrInvalid.
func CheckRestore(c Context, evs []event.Event, record *RunMeta) ([][]byte, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: restore of %s: %s", ErrInvalid, c, fmt.Sprintf(format, args...))
	}
	if !c.Valid() {
		return nil, bad("context %q", c.String())
	}
	if len(evs) == 0 {
		return nil, bad("no events")
	}
	if record != nil && (c.Type != "flow" || record.RunID != c.ID || !event.ValidName(record.FlowName) || !event.ValidName(record.Status)) {
		return nil, bad("record of run %q of flow %q, status %q", record.RunID, record.FlowName, record.Status)
	}
	bodies := make([][]byte, len(evs))
	var last event.ID
	for i, e := range evs {
		if e.ID.IsZero() || e.ID.Compare(last) <= 0 {
			return nil, bad("event %d: id %s does not follow %s", i, e.ID, last)
		}
		last = e.ID
		if !event.ValidKind(e.Kind) {
			return nil, bad("event %d: kind %q", i, e.Kind)
		}
		body, err := e.MarshalBody()
		if err != nil {
			return nil, bad("event %d: %v", i, err)
		}
		bodies[i] = body
	}
	return bodies, nil
}
