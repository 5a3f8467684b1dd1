package stream

import (
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// CloseReason says why a stream ended.
type CloseReason string

// The reasons a stream ends.
const (
	CloseClient   CloseReason = "client"   // the client went away
	CloseSlow     CloseReason = "slow"     // its queue overflowed
	CloseRotate   CloseReason = "rotate"   // it reached its maximum lifetime
	CloseShutdown CloseReason = "shutdown" // the server drained it
	CloseExpired  CloseReason = "expired"  // the credential that opened it expired
	CloseError    CloseReason = "error"    // a write or a store read failed
)

// StartKind says how a stream began: what the client's position was worth.
type StartKind string

// The ways a stream begins.
const (
	StartFresh   StartKind = "fresh"      // no position: backfill or live only
	StartExact   StartKind = "exact"      // resumed right after the client's event
	StartReset   StartKind = "reset"      // the client's event is no longer retained
	StartUnknown StartKind = "unknown_id" // the client's position was not an id
)

// Observer is told what streams do, for metrics. Its methods are called on
// the hot paths and must neither block nor retain their arguments.
type Observer interface {
	// Opened: a stream of c has sent its headers.
	Opened(c store.Context)
	// Closed: that stream ended.
	Closed(c store.Context, reason CloseReason)
	// Started: the stream's backfill or replay is written.
	Started(kind StartKind, events int, took time.Duration)
	// Received: the live feed brought id to this instance.
	Received(id event.ID)
	// Broadcast: one event was offered to subscribers queues in took.
	Broadcast(subscribers int, took time.Duration)
	// Flushed: live events were written and flushed to one client; oldest
	// is the first of them.
	Flushed(events, bytes int, oldest event.ID)
	// Repaired: events the live feed had missed were read from the stream.
	Repaired(events int)
	// Resubscribed: a context's live feed ended and was replaced.
	Resubscribed()
}

// nopObserver is the Observer of a Handler built without one.
type nopObserver struct{}

func (nopObserver) Opened(store.Context)                  {}
func (nopObserver) Closed(store.Context, CloseReason)     {}
func (nopObserver) Started(StartKind, int, time.Duration) {}
func (nopObserver) Received(event.ID)                     {}
func (nopObserver) Broadcast(int, time.Duration)          {}
func (nopObserver) Flushed(int, int, event.ID)            {}
func (nopObserver) Repaired(int)                          {}
func (nopObserver) Resubscribed()                         {}
