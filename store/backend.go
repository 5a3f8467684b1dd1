package store

import "context"

// Backend is a whole storage backend: every contract nqd keeps its data
// through. Each of nqd's backends (the embedded store, Redis, PostgreSQL) is
// one and passes the conformance suite in store/storetest for all of it, so
// the server opens its backend as a Backend and never asks which one it got.
// Where the backends really differ, a method below says how.
type Backend interface {
	Store
	DefinitionStore
	RunStore
	KindIndex
	KV
	QueueStore
	Restorer
	Checkpointer
	Retainer
	Trimmer

	// LiveReliable reports whether the live feed never skips an event
	// without ending the subscription. An in-process fan-out does not; a
	// feed over the network (Redis Pub/Sub, PostgreSQL LISTEN/NOTIFY) can
	// lose a message, so its subscribers check what they receive against
	// the stream.
	LiveReliable() bool

	// LiveHealthy reports whether the live feed is connected, for the
	// readiness probe: an instance whose feed is down stops taking SSE
	// clients. A feed with no connection to lose is always healthy.
	// Errors: ErrUnavailable, ErrClosed.
	LiveHealthy(ctx context.Context) error
}
