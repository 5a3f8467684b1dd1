package store

import (
	"context"
	"time"

	"github.com/nqd-dev/nqd/event"
)

// This file is the kind index: every event of a watched kind appended with
// Store.Append, from any context, is also recorded under its kind for a
// while, in the same atomic step as the append. Event awaits read it to find
// the events they wait for: one registered just after a matching event still
// finds it by reading back over its look-back window, and one registered long
// before finds the events that arrived since. Events the engine writes with
// UpdateRun (a run's own lifecycle) are not indexed.
//
// Only watched kinds are indexed, so appends of the many kinds no await waits
// for pay one set lookup instead of a second write. The engine watches an
// event await's kind when it stores the definition, before any run of it
// can register the await, so every event appended once the definition
// exists is indexed and look-back over such events is unaffected. Kinds are
// never unwatched: a forgotten one costs an index write per append, a
// wrongly dropped one would lose a waiter's event.

// DefaultKindWindow is how long the kind index keeps an event unless a
// backend is configured otherwise.
const DefaultKindWindow = time.Hour

// KindEntry is one event found in the kind index.
type KindEntry struct {
	// Seq is the entry's position in its kind's index; later appends have
	// larger ones, so it is a cursor for the next read.
	Seq     event.ID
	Context Context
	// Event is the record as stored, with the id and time of its own
	// stream.
	Event event.Event
	// Consumed is set once a RunUpdate consumed the entry.
	Consumed bool
}

// KindRef names an entry of the kind index.
type KindRef struct {
	Kind string
	Seq  event.ID
}

// KindIndex reads the kind index and says which kinds it records.
type KindIndex interface {
	// WatchKinds makes the index record the events of kinds appended from
	// the time it returns on (every instance sharing the store sees it);
	// earlier events of a newly watched kind are not there. Watching a
	// watched kind again is a no-op. Errors: ErrInvalid, ErrUnavailable,
	// ErrClosed.
	WatchKinds(ctx context.Context, kinds ...string) error

	// KindEvents returns up to limit (1 to 1000) entries of kind after
	// position after (the zero ID: from the oldest kept), oldest first.
	// Entries older than the backend's window may be gone. Errors:
	// ErrInvalid, ErrUnavailable, ErrClosed.
	KindEvents(ctx context.Context, kind string, after event.ID, limit int) ([]KindEntry, error)
}
