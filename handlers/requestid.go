package handlers

import (
	"net/http"
	"regexp"

	"github.com/rs/xid"
	"github.com/rs/zerolog"
)

// requestIDRe is what a caller's X-Request-ID must look like to be kept: a
// short token such as a UUID, an xid or a trace id. The id is written into
// every log line of the request, so it must be bounded and hold nothing a
// log reader could take for structure.
var requestIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// requestID keeps a valid incoming X-Request-ID, so that a caller can follow
// its request through nqd's log, and issues a new one otherwise. The id is
// returned in the response header and added to the request's logger as
// req_id.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-ID")
		if !requestIDRe.MatchString(id) {
			id = xid.New().String()
		}
		w.Header().Set("X-Request-ID", id)
		zerolog.Ctx(r.Context()).UpdateContext(func(c zerolog.Context) zerolog.Context {
			return c.Str("req_id", id)
		})
		next.ServeHTTP(w, r)
	})
}
