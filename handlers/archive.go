package handlers

import (
	"context"
	"net/http"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/reducers"
	"github.com/nqd-dev/nqd/store"
)

// ArchiveReader reads archived contexts back (see archive.Archive.Get); the
// read routes answer from it with `source=archive`.
type ArchiveReader interface {
	// Get returns c's events, oldest first, checked against the archive's
	// manifest. Errors: store.ErrNotFound, archive.ErrCorrupt,
	// store.ErrInvalid.
	Get(ctx context.Context, c store.Context) (archive.Manifest, []event.Event, error)
}

// errNoArchive answers `source=archive` on a server built without an
// archive: there is nothing archived to find.
var errNoArchive = &nqd.Error{
	Code:    nqd.CodeNotFound,
	Message: "This server keeps no archive: set NQ_ARCHIVE_URL (or NQ_ARCHIVE_DIR) to read archived runs.",
}

// contextSource is where a read route finds a context: the live store or the
// archive. The routes read both through it, so an archived run answers
// exactly as it did while it was live.
type contextSource interface {
	Info(ctx context.Context) (store.StreamInfo, error)
	Range(ctx context.Context, q store.RangeQuery) ([]event.Event, error)
	// StateAt folds the events up to and including at.
	StateAt(ctx context.Context, at event.ID) (reducers.State, error)
}

// sourceOf picks the source the request's `source` parameter names: `live`
// (the default) or `archive`.
func (a *API) sourceOf(r *http.Request, c store.Context) (contextSource, error) {
	switch r.URL.Query().Get("source") {
	case "", "live":
		src := liveSource{store: a.store, history: a.store, state: a.state, c: c}
		if a.history != nil {
			src.history = a.history
		}
		return src, nil
	case "archive":
		if a.archive == nil {
			return nil, errNoArchive
		}
		_, evs, err := a.archive.Get(r.Context(), c)
		if err != nil {
			return nil, err
		}
		return archivedSource{evs: evs, r: reducers.For(c.Type)}, nil
	}
	return nil, invalidField("source", "must be live or archive")
}

// liveSource reads a context from the store and its states from the
// snapshot cache. Its events come from history, which reads through to the
// archive once compaction trimmed the stream; its Info stays the store's, so
// eventCount is the live stream's length.
type liveSource struct {
	store   Reader
	history History
	state   StateReader
	c       store.Context
}

func (s liveSource) Info(ctx context.Context) (store.StreamInfo, error) {
	return s.store.Info(ctx, s.c)
}

func (s liveSource) Range(ctx context.Context, q store.RangeQuery) ([]event.Event, error) {
	return s.history.Range(ctx, s.c, q)
}

func (s liveSource) StateAt(ctx context.Context, at event.ID) (reducers.State, error) {
	return s.state.StateAt(ctx, s.c, at)
}

// archivedSource answers from a context's archived events, held whole: an
// archive is read and checked in one pass, so there is no cheaper page of it.
// States are folded from the events each time; archived runs are read
// rarely and are not worth a place in the snapshot cache.
type archivedSource struct {
	evs []event.Event
	r   reducers.Reducer
}

func (s archivedSource) Info(context.Context) (store.StreamInfo, error) {
	if len(s.evs) == 0 {
		return store.StreamInfo{}, nil
	}
	return store.StreamInfo{Length: int64(len(s.evs)), FirstID: s.evs[0].ID, LastID: s.evs[len(s.evs)-1].ID}, nil
}

func (s archivedSource) Range(_ context.Context, q store.RangeQuery) ([]event.Event, error) {
	return archive.Filter(s.evs, q), nil
}

func (s archivedSource) StateAt(_ context.Context, at event.ID) (reducers.State, error) {
	if at.IsZero() {
		// A zero Through is no bound to Filter; here it is before every event.
		return s.r.Init(), nil
	}
	return reducers.Fold(s.r, archive.Filter(s.evs, store.RangeQuery{Through: at}))
}
