package handlers

import (
	"math"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/stream"
)

// Streamer serves the Server-Sent Events routes (their frames are described
// in openapi.yaml).
type Streamer interface {
	// Serve streams req, which the route has read and authorized, and calls
	// req.Release when the stream ends, which may be after it returns. It
	// returns an error only when it refuses before the response starts:
	// stream.ErrDraining, or a store failure.
	Serve(w http.ResponseWriter, r *http.Request, req stream.Request) error
}

// serveStream serves GET /api/_events/{type}/{id}/stream and the raw tail
// GET /api/_events/sse?stream=<prefix>:<type>:<id>. It admits a read token
// or a stream token covering the context, ends the stream when a stream
// token expires, and holds the client's stream slots for the stream's life.
func (a *API) serveStream(w http.ResponseWriter, r *http.Request) {
	req, typ, id, bad := a.streamRequest(r)
	p, until, err := a.access.Auth.Stream(r, typ, id)
	if err == nil {
		err = bad
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	release, ok := a.access.streams.Acquire(clientKeys(r, p)...)
	if !ok {
		w.Header().Set("Retry-After", streamRetryAfter)
		writeError(w, r, &nqd.Error{Code: nqd.CodeRateLimited,
			Message: "Too many streams are open for this client; close one or retry later."})
		return
	}
	req.Expiry, req.Release = until, release
	req.RequestID, req.Client = w.Header().Get("X-Request-ID"), clientIPOf(r)
	if err := a.stream.Serve(w, r, req); err != nil {
		writeError(w, r, err)
	}
}

// streamRequest reads the stream r asks for. typ and id are the context the
// client named, for the access check, even when the request is invalid
// (err); a raw tail of no context (the quiet `<prefix>:events`) names none.
func (a *API) streamRequest(r *http.Request) (req stream.Request, typ, id string, err error) {
	q := r.URL.Query()
	req.Resume, req.From = stream.ResumePosition(r)
	if typ = chi.URLParam(r, "type"); typ != "" {
		id = chi.URLParam(r, "id")
		if req.Context, err = a.contextParam(r); err != nil {
			return req, typ, id, err
		}
		req.Backfill, err = intParam(q, "backfill", stream.BackfillMax, 0, math.MaxInt)
		return req, typ, id, err
	}
	req.Tail = true
	key := q.Get("stream")
	c, quiet, ok := stream.TailStream(key, a.keyPrefix)
	typ, id = c.Type, c.ID
	switch {
	case q.Has("stream") && key == "":
		err = invalidField("stream", "must not be empty: "+a.keyPrefix+":<type>:<id>")
	case quiet:
		// The v0.3 UI's dashboard tails `<prefix>:events` by default (or
		// sends no stream), which nothing writes: it gets an open, quiet
		// stream, as it did there.
		req.Quiet = true
	case !ok:
		err = invalidField("stream", "must be "+a.keyPrefix+":<type>:<id> with a valid type and id")
	default:
		req.Context = c
	}
	return req, typ, id, err
}
