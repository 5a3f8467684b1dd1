package handlers

import (
	"context"
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

// requestScope gives each request its id and its client's address, and a
// logger that names both, in one context: a valid incoming X-Request-ID is
// kept, so that a caller can follow its request through nqd's log, and a new
// one issued otherwise; the id is returned in the response header and logged
// as req_id. The client's address (see access.clientIP) is found once, for
// the rate limits, the stream caps, trigger sources and the log line's
// client.
func (ac access) requestScope(log zerolog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := r.Header.Get("X-Request-ID")
			if !requestIDRe.MatchString(id) {
				id = xid.New().String()
			}
			w.Header().Set("X-Request-ID", id)
			addr := ac.clientIP(r)
			l := log.With().Str("req_id", id).Str("client", addr).Logger()
			ctx := context.WithValue(l.WithContext(r.Context()), clientAddrKey{}, addr)
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}
