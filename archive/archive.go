// Package archive keeps finished runs outside the live store, so retention
// can drop them from the store without losing them. A run's archive is its
// events as gzip-compressed NDJSON (each line the record as nqd sends it, ids
// included) and a manifest that counts them and holds the checksum of the
// compressed file.
//
// Bucket keeps archives in an object store's bucket (S3 and the stores that
// speak its protocol) or in a local directory, with the same names in both.
package archive

import (
	"context"
	"encoding/json"
	"iter"
	"time"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// ErrCorrupt reports an archive that does not match its manifest: a changed
// or truncated file, or events that do not decode.
var ErrCorrupt error = &nqd.Error{Code: nqd.CodeArchiveCorrupt, Message: "The archived copy does not match its manifest and cannot be read."}

// Manifest describes one archived context. It is written after the events,
// so an archive without one was never finished and does not exist.
type Manifest struct {
	Type      string    `json:"type"`
	ID        string    `json:"id"`
	Events    int64     `json:"events"`
	FirstID   string    `json:"firstId,omitempty"`
	LastID    string    `json:"lastId,omitempty"`
	SHA256    string    `json:"sha256"` // hex digest of the compressed file
	Bytes     int64     `json:"bytes"`  // size of the compressed file
	CreatedAt time.Time `json:"createdAt"`
	// Record is the run's record (store.RunMeta as JSON) when the context
	// is a run, so a restore can bring the run back to its listings.
	Record json.RawMessage `json:"record,omitempty"`
}

// Context is the context the manifest describes.
func (m Manifest) Context() store.Context { return store.Context{Type: m.Type, ID: m.ID} }

// Archive stores whole contexts. Implementations are safe for concurrent use;
// Put of a context that is already archived replaces it.
type Archive interface {
	// Put archives c: the events in order (an error from the sequence
	// aborts the Put and leaves any earlier archive of c in place) and
	// record, which may be nil. Errors: store.ErrInvalid, the sequence's
	// error, IO errors.
	Put(ctx context.Context, c store.Context, record json.RawMessage, events iter.Seq2[event.Event, error]) (Manifest, error)
	// Get reads c's archive back, checking it against its manifest.
	// Errors: store.ErrNotFound, ErrCorrupt, store.ErrInvalid.
	Get(ctx context.Context, c store.Context) (Manifest, []event.Event, error)
	// List returns the manifests of every archived context of type typ,
	// ordered by id. Errors: store.ErrInvalid, ErrCorrupt (an unreadable
	// manifest).
	List(ctx context.Context, typ string) ([]Manifest, error)
	// Verify checks c's archive against its manifest without keeping the
	// events. Errors: store.ErrNotFound, ErrCorrupt, store.ErrInvalid.
	Verify(ctx context.Context, c store.Context) (Manifest, error)
	// Types lists the context types that have archives.
	Types(ctx context.Context) ([]string, error)
}

// Slice adapts a slice of events to the sequence Put reads.
func Slice(evs []event.Event) iter.Seq2[event.Event, error] {
	return func(yield func(event.Event, error) bool) {
		for _, e := range evs {
			if !yield(e, nil) {
				return
			}
		}
	}
}

// Filter returns the events of evs that q selects, as store.Range would from
// a live stream, so reads from an archive answer the same queries.
func Filter(evs []event.Event, q store.RangeQuery) []event.Event {
	out := []event.Event{}
	keep := func(e event.Event) bool {
		return (q.After.IsZero() || e.ID.Compare(q.After) > 0) &&
			(q.Through.IsZero() || e.ID.Compare(q.Through) <= 0)
	}
	if q.Reverse {
		for i := len(evs) - 1; i >= 0 && (q.Limit <= 0 || len(out) < q.Limit); i-- {
			if keep(evs[i]) {
				out = append(out, evs[i])
			}
		}
		return out
	}
	for _, e := range evs {
		if q.Limit > 0 && len(out) >= q.Limit {
			break
		}
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}
