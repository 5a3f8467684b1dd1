// Package store is the contract between nqd and its storage backends: one
// append-only stream of events per context, live subscriptions to those
// streams, and sorted indexes of contexts. Every backend passes the conformance
// suite in store/storetest.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"time"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/event"
)

// Sentinel errors. Backends wrap them; callers test with errors.Is. Each
// is an *nqd.Error whose message is what an API client is told.
var (
	// ErrNotFound: the thing asked for does not exist.
	ErrNotFound error = &nqd.Error{Code: nqd.CodeNotFound, Message: "The resource does not exist."}
	// ErrConflict: the write contradicts the current state (e.g. an
	// idempotency key reused with a different request).
	ErrConflict error = &nqd.Error{Code: nqd.CodeConflict, Message: "The request conflicts with what is stored, such as an idempotency key reused for a different request."}
	// ErrInvalid: an argument breaks the contract (bad name, empty batch, ...).
	ErrInvalid error = &nqd.Error{Code: nqd.CodeBadRequest, Message: "The request breaks a storage rule."}
	// ErrKeyReused: an idempotency key that AppendOptions.SameRequest guards
	// was used before for other events; nothing was written.
	ErrKeyReused error = &nqd.Error{Code: nqd.CodeKeyReused, Message: "The Idempotency-Key was used before for a different request; nothing was stored. Use a new key for a new request."}
	// ErrOutcomeUnknown: the write was sent but its answer was lost, and the
	// backend could not be asked in time whether it was applied. It may or
	// may not have been; a retry with the same idempotency key is safe.
	ErrOutcomeUnknown error = &nqd.Error{Code: nqd.CodeOutcomeUnknown, Message: "The store took the write but its answer was lost, and it could not be asked in time whether the write was applied. Retry with the same Idempotency-Key: that is always safe."}
	// ErrUnavailable: the backend cannot be reached; nothing was written.
	ErrUnavailable error = &nqd.Error{Code: nqd.CodeUnavailable, Message: "The store is unavailable and nothing was stored; retry later."}
	// ErrClosed: the store or subscription was closed.
	ErrClosed error = &nqd.Error{Code: nqd.CodeUnavailable, Message: "The store is shutting down; retry later."}
	// ErrOverflow: a subscriber fell behind by more than its buffer and was
	// dropped; it resumes by reading the stream after its last id.
	ErrOverflow = errors.New("subscriber overflow")
	// ErrLiveLost: the live feed was interrupted and events may have been
	// missed; the subscriber resumes by reading the stream after its last id.
	ErrLiveLost = errors.New("live feed lost")
)

// DefaultPrefix is the key prefix stream names start with when none is
// configured, the one the Nuxt Queue UI names streams with.
const DefaultPrefix = "nq"

// Context names one event stream, `<prefix>:<Type>:<ID>`.
type Context struct {
	Type string
	ID   string
}

// Valid reports whether both parts pass the name rules (event/names.go).
func (c Context) Valid() bool { return event.ValidType(c.Type) && event.ValidContextID(c.ID) }

func (c Context) String() string { return c.Type + ":" + c.ID }

// Index names a sorted set of context ids: `<prefix>:<Type>s` or, with a
// Name, `<prefix>:<Type>s:<Name>` (e.g. the runs of one flow, `flows:<name>`).
type Index struct {
	Type string
	Name string
}

// Valid reports whether the index names pass the name rules (event/names.go).
func (ix Index) Valid() bool {
	return event.ValidType(ix.Type) && (ix.Name == "" || event.ValidName(ix.Name))
}

// DefaultIdempotencyWindow is how long a backend remembers an idempotency
// key when its options set no window.
const DefaultIdempotencyWindow = 24 * time.Hour

// MaxIdempotencyKey is the longest idempotency key in bytes, the same in
// every backend (it keeps a key well under bbolt's key size limit).
const MaxIdempotencyKey = 1024

// AppendOptions tune one append.
type AppendOptions struct {
	// IdempotencyKey, when set (at most MaxIdempotencyKey bytes), makes a
	// repeat of the append to the same context within the store's
	// idempotency window return the first result and append nothing. Keys
	// are scoped to the context.
	IdempotencyKey string
	// SameRequest makes the key a client's request key: a repeat must carry
	// the same events (by Fingerprint) to be replayed, and other events get
	// ErrKeyReused. Without it a repeat replays whatever it carries, which
	// lets nqd's own keys mark "at most once".
	SameRequest bool
	// Held, when set, makes the append require, before anything else, that
	// a claimed job of the flow engine is held by Held.Lease (see
	// RunUpdate.Held): otherwise it appends nothing, replays nothing and
	// fails with ErrConflict. A worker's report of the job appends so.
	Held *JobAck
}

// Fingerprint is what an idempotency record remembers of the events it
// stored: a SHA-256 over their stored bodies, each prefixed by its length.
func Fingerprint(bodies [][]byte) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	for _, b := range bodies {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// AppendResult is what an append stored.
type AppendResult struct {
	Events []event.Event // with ID set, in stream order
	// Replayed is true when the idempotency key had been seen: Events are the
	// first append's and nothing new was written.
	Replayed bool
	// Claimed are the jobs a run update's Claim took (RunUpdate.Claim).
	Claimed []Job
}

// RangeQuery selects events of one stream. Zero values mean unbounded.
type RangeQuery struct {
	After   event.ID // exclusive lower bound
	Through event.ID // inclusive upper bound (time travel: event.IDAt(t))
	Limit   int      // at most this many; 0 means no limit
	Reverse bool     // newest first; Limit then keeps the newest
}

// Bounds turns q's two optional bounds into an inclusive lower id and an
// exclusive upper id, event.MaxID meaning none (so that an event at MaxID
// is still read). ok is false when nothing can match.
func (q RangeQuery) Bounds() (lo, hi event.ID, ok bool) {
	hi = event.MaxID
	if !q.After.IsZero() {
		if q.After == event.MaxID {
			return lo, hi, false
		}
		lo = q.After.Next()
	}
	if !q.Through.IsZero() && q.Through != event.MaxID {
		hi = q.Through.Next()
	}
	return lo, hi, true
}

// StreamInfo describes a stream.
type StreamInfo struct {
	Length  int64
	FirstID event.ID // zero when empty
	LastID  event.ID // zero when empty
}

// IndexEntry is one member of an index with its score in epoch milliseconds.
type IndexEntry struct {
	ID    string
	Score int64
}

// IndexPage is one page of an index, newest (highest score) first.
type IndexPage struct {
	Entries []IndexEntry
	Total   int64
}

// Subscription delivers the events appended to one context after it was
// created, in order. Ready receives after events arrive or the subscription
// ends (one receive may stand for many); Next then takes them one by one.
// Once it has ended and every waiting event is taken, Next reports it not
// live and Err says why (ErrClosed after Close, ErrOverflow, ErrLiveLost, or
// the context's error).
type Subscription interface {
	Ready() <-chan struct{}
	Next() (e event.Event, ok, live bool)
	Err() error
	Close()
}

// Receive waits for sub's next event. The error is sub's once it has ended
// and every event before the end was received, or ctx's.
func Receive(ctx context.Context, sub Subscription) (event.Event, error) {
	for {
		e, ok, live := sub.Next()
		if ok {
			return e, nil
		}
		if !live {
			return event.Event{}, sub.Err()
		}
		select {
		case <-sub.Ready():
		case <-ctx.Done():
			return event.Event{}, ctx.Err()
		}
	}
}

// DefaultSubscriptionBuffer is how many events a subscription that asks for
// no other bound holds, unless the backend's options set another. Memory is
// taken only for the events waiting.
const DefaultSubscriptionBuffer = 256

// Store is the storage contract.
//
// Appends are atomic: all of a batch is stored and published, or none. On
// append, a backend also maintains these indexes in the same atomic step:
//   - the context's first event adds it to Index{Type: c.Type} with the
//     event's time as score;
//   - an event adds it to the index JoinedIndex names, if any:
//     `flow.started` / `flow.start` with a FlowName to
//     Index{Type: "flow", Name: FlowName}, `trigger.registered` to
//     Index{Type: "trigger"}.
//
// An index member keeps its first score.
type Store interface {
	// Append stores evs (at least one) at the end of c's stream, assigning
	// increasing ids, and publishes each to c's live subscribers on every
	// instance. Errors: ErrInvalid (bad context, empty batch, bad kind),
	// ErrConflict (opts.Held's job is not held by its lease), ErrUnavailable
	// (nothing was written).
	Append(ctx context.Context, c Context, evs []event.Event, opts AppendOptions) (AppendResult, error)

	// Range reads events of c's stream in id order (or reverse). A context
	// with no events gives an empty slice, not an error. Errors: ErrInvalid,
	// ErrUnavailable.
	Range(ctx context.Context, c Context, q RangeQuery) ([]event.Event, error)

	// Info returns the length and the first and last ids of c's stream; an
	// empty stream has zero values. Errors: ErrInvalid, ErrUnavailable.
	Info(ctx context.Context, c Context) (StreamInfo, error)

	// Subscribe starts delivering c's new events. The subscription holds at
	// most buffer events not yet taken (when buffer <= 0, the backend's configured size,
	// DefaultSubscriptionBuffer unless set); a subscriber that lets it fill
	// is ended with ErrOverflow. Events appended after Subscribe returns are
	// delivered; earlier ones are read with Range. Errors:
	// ErrInvalid, ErrClosed, ErrUnavailable.
	Subscribe(ctx context.Context, c Context, buffer int) (Subscription, error)

	// IndexAdd adds id to ix with score (epoch ms) unless it is there already.
	// Errors: ErrInvalid, ErrUnavailable.
	IndexAdd(ctx context.Context, ix Index, id string, score int64) error

	// IndexList returns members of ix, highest score first (ties by id),
	// skipping offset and returning at most limit. Errors: ErrInvalid,
	// ErrUnavailable.
	IndexList(ctx context.Context, ix Index, offset, limit int) (IndexPage, error)

	// Ping checks that the backend is reachable. Errors: ErrUnavailable.
	Ping(ctx context.Context) error

	// Close releases the store; subscriptions end with ErrClosed.
	Close() error
}

// Checkpointer keeps reduced states beside a context's stream, never inside
// it, so that a cold rebuild of a long stream folds only the events after the
// nearest checkpoint. A checkpoint at id holds the state of every event up to
// and including id. Backends keep only a few checkpoints per context, the
// newest; a checkpoint lives no longer than its stream.
type Checkpointer interface {
	// PutCheckpoint stores state as c's checkpoint at id, replacing one at the
	// same id, and drops c's oldest checkpoints beyond the backend's limit.
	// Errors: ErrInvalid (bad context, zero id), ErrUnavailable, ErrClosed.
	PutCheckpoint(ctx context.Context, c Context, at event.ID, state []byte) error

	// Checkpoint returns c's newest checkpoint at or before atOrBefore.
	// Errors: ErrNotFound (none), ErrInvalid, ErrUnavailable, ErrClosed.
	Checkpoint(ctx context.Context, c Context, atOrBefore event.ID) (event.ID, []byte, error)
}
