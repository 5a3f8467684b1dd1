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

	// Features says what the backend does beyond the contracts; it never
	// changes.
	Features() Features

	// LiveHealthy reports whether the live feed is connected, for the
	// readiness probe: an instance whose feed is down stops taking SSE
	// clients. A feed with no connection to lose is always healthy.
	// Errors: ErrUnavailable, ErrClosed.
	LiveHealthy(ctx context.Context) error
}

// Features are what a backend does where backends differ, reported once
// (Backend.Features) and read by the engine, the server and the
// conformance suite. The zero value is a backend that does none of it.
type Features struct {
	// LiveReliable: the live feed never skips an event without ending the
	// subscription. An in-process fan-out does not; a feed over the network
	// (Redis Pub/Sub, PostgreSQL LISTEN/NOTIFY) can lose a message, so its
	// subscribers check what they receive against the stream.
	LiveReliable bool
	// ChecksDefinitions: UpdateRun refuses with ErrConflict an update whose
	// RunUpdate.Definition is not the flow's stored definition. On such a
	// store the engine decides a start or an emit on its cached definition
	// without reading it first.
	ChecksDefinitions bool
	// ClaimsInUpdate: UpdateRun takes a RunUpdate's Claim in the update's
	// own write, so a completion claims its worker's next job with it.
	ClaimsInUpdate bool
	// EnqueuesLeased: a job of RunUpdate.Enqueue with a Lease is stored as
	// claimed under that lease until its LeaseUntil, and the update is
	// refused with ErrConflict, writing nothing, when the job's queue is
	// paused. The engine hands a run's first job, or the step an emit makes
	// ready, to a claim waiting on its instance that way, in the start's or
	// emit's own write rather than in a write of the claim's after it.
	EnqueuesLeased bool
}
