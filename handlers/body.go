package handlers

import (
	"errors"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/nqd-dev/nqd"
)

// readBodies bounds the time a request body may take to arrive, and turns a
// body that stops short into the client's error: one that ends before its
// Content-Length is a 400, one that stops arriving a 408. Without it a
// stalled client holds its handler until the connection dies, and the read's
// error would answer as nqd's own failure, a 500.
func (a *API) readBodies(next http.Handler) http.Handler {
	// Half the request timeout, so that a stalled body is answered 408
	// before the API timeout answers 504, and the handler has the rest.
	limit := a.limits.RequestTimeout / 2
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(limit)) == nil {
			r.Body = &bodyReader{ReadCloser: r.Body, rc: rc, limit: limit}
		}
		next.ServeHTTP(w, r)
	})
}

// bodyReader is a request body under readBodies' deadline.
type bodyReader struct {
	io.ReadCloser
	rc    *http.ResponseController
	limit time.Duration
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		// Once the body is read the server watches the connection for
		// the client going away; the deadline left in place would end
		// that watch and cancel a request that runs longer, such as a
		// worker's long poll.
		_ = b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, io.ErrUnexpectedEOF):
		err = badRequest("The body ended before its Content-Length; nothing was stored.")
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = nqd.Errorf(nqd.CodeBodyTimeout, "The body did not arrive within %s; nothing was stored.", b.limit)
	}
	return n, err
}
