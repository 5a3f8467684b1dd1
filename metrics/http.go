package metrics

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
)

// appendRoute is the route pattern of appends, whose whole request time is
// the total stage of nqd_append_duration_seconds.
const appendRoute = "/api/_events/{type}/{id}"

// Middleware counts and times the requests of a chi router it wraps, by route
// pattern rather than path so that the series stay few. It must wrap the
// router from outside: it hands the router the routing context to fill.
func (m *Metrics) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rctx := chi.RouteContext(r.Context())
		if rctx == nil {
			// chi reuses a routing context it finds, so the pattern it
			// matched can be read here once it is done.
			rctx = chi.NewRouteContext()
			r = r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, rctx))
		}
		sw := &statusWriter{ResponseWriter: w}
		start := time.Now()
		next.ServeHTTP(sw, r)
		took := time.Since(start).Seconds()

		route := rctx.RoutePattern()
		if route == "" {
			route = "unmatched"
		}
		code := sw.status
		if code == 0 {
			code = http.StatusOK
		}
		m.httpRequests.WithLabelValues(route, r.Method, strconv.Itoa(code)).Inc()
		m.httpDuration.WithLabelValues(route).Observe(took)
		if route == appendRoute && r.Method == http.MethodPost {
			m.appendDuration.WithLabelValues("total").Observe(took)
		}
	})
}

// statusWriter remembers the status a handler wrote. Unwrap keeps
// http.ResponseController (flushes, deadlines) working through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush lets streams flush through the wrapper: the SSE handler checks for
// an http.Flusher before it starts.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
