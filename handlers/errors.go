package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-playground/validator/v10"
	"github.com/rs/zerolog/hlog"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/stream"
)

// retryAfterWait is what a 503 asks clients to wait: long enough for a
// Redis failover or restart to show, short enough not to stall a UI.
const retryAfterWait = 5 * time.Second

// statusClientClosed is nginx's code for a client that left before the
// answer; it only ever reaches the access log.
const statusClientClosed = 499

// statuses is the one table from an error's code (see nqd.Error) to the
// HTTP status it answers with.
var statuses = map[string]int{
	nqd.CodeBadRequest:       http.StatusBadRequest,
	nqd.CodeValidation:       http.StatusBadRequest,
	nqd.CodeUnprocessable:    http.StatusUnprocessableEntity,
	nqd.CodeUnauthorized:     http.StatusUnauthorized,
	nqd.CodeForbidden:        http.StatusForbidden,
	nqd.CodeCrossOrigin:      http.StatusForbidden,
	nqd.CodeHostNotAllowed:   http.StatusForbidden,
	nqd.CodeNotFound:         http.StatusNotFound,
	nqd.CodeMethodNotAllowed: http.StatusMethodNotAllowed,
	nqd.CodeConflict:         http.StatusConflict,
	nqd.CodeKeyInFlight:      http.StatusConflict,
	nqd.CodeGone:             http.StatusGone,
	nqd.CodeTooLarge:         http.StatusRequestEntityTooLarge,
	nqd.CodeUnsupportedMedia: http.StatusUnsupportedMediaType,
	nqd.CodeKeyReused:        http.StatusUnprocessableEntity,
	nqd.CodeRateLimited:      http.StatusTooManyRequests,
	nqd.CodeBodyTimeout:      http.StatusRequestTimeout,
	nqd.CodeCanceled:         statusClientClosed,
	nqd.CodeInternal:         http.StatusInternalServerError,
	// A 502: the archive is storage behind nqd, and its copy is bad; the
	// request was fine and repeating it will not help.
	nqd.CodeArchiveCorrupt: http.StatusBadGateway,
	nqd.CodeUnavailable:    http.StatusServiceUnavailable,
	nqd.CodeTimeout:        http.StatusGatewayTimeout,
	// A 504 like a timeout, and never a 503, which promises nothing was
	// stored.
	nqd.CodeOutcomeUnknown: http.StatusGatewayTimeout,
}

// statusOf is the status of code; a code missing from the table is a
// mistake of nqd's, a 500.
func statusOf(code string) int {
	if s, ok := statuses[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// badRequest is a 400 for input that cannot be read at all.
func badRequest(format string, args ...any) *nqd.Error {
	return nqd.Errorf(nqd.CodeBadRequest, format, args...)
}

// invalid is a 400 naming the fields that break a rule.
func invalid(fields map[string]string) *nqd.Error {
	return &nqd.Error{Code: nqd.CodeValidation, Message: "The request has invalid fields.", Fields: fields}
}

// invalidField is invalid for a single field.
func invalidField(field, rule string) *nqd.Error {
	return invalid(map[string]string{field: rule})
}

// toError turns any error into the nqd.Error it answers with: the first one
// in its chain, or one for the request failures the standard library and
// the validator report.
func toError(err error) *nqd.Error {
	var e *nqd.Error
	var tooBig *http.MaxBytesError
	var verrs validator.ValidationErrors
	switch {
	case errors.As(err, &e):
		return e
	case errors.As(err, &tooBig):
		return nqd.Errorf(nqd.CodeTooLarge, "The body is larger than %d bytes.", tooBig.Limit)
	case errors.As(err, &verrs):
		return invalid(fieldRules(verrs, ""))
	}
	return &nqd.Error{Code: nqd.ErrorCode(err), Message: nqd.ErrorMessage(err)}
}

// errorBody is the error shape of openapi.yaml (Error).
type errorBody struct {
	Error errorFields `json:"error"`
}

type errorFields struct {
	Code    string            `json:"code"`
	Message string            `json:"message"`
	Fields  map[string]string `json:"fields,omitempty"`
}

// handler is a route's handler that returns its error rather than
// answering it: serve answers it, so every route's errors take one path.
type handler func(w http.ResponseWriter, r *http.Request) error

// serve adapts h to the router: an error h returns is answered through
// writeError. h returns an error only before it has written anything.
func serve(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			writeError(w, r, err)
		}
	}
}

// answerOf is the status and the body err is answered with, on HTTP and
// on the worker channel alike.
func answerOf(err error) (int, errorBody) {
	e := toError(err)
	status, code := statusOf(e.Code), e.Code
	if code == nqd.CodeUnprocessable {
		// Clients know one validation code; the status tells whether the
		// request's form or its content failed.
		code = nqd.CodeValidation
	}
	return status, errorBody{errorFields{Code: code, Message: e.Message, Fields: e.Fields}}
}

// retryAfter reports whether an answer with status and code asks the client
// to wait retryAfterWait before it tries again.
func retryAfter(status int, code string) bool {
	return status == http.StatusServiceUnavailable || code == nqd.CodeOutcomeUnknown
}

// writeError is the one way to answer with an error.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, body := answerOf(err)
	code := body.Error.Code
	log := hlog.FromRequest(r)
	switch {
	case status >= http.StatusInternalServerError && isProbe(r):
		// A failing /readyz is the probe's answer, asked every few
		// seconds; the failure behind it is logged where it happens.
		log.Debug().Err(err).Int("status", status).Msg("not ready")
	case status >= http.StatusInternalServerError && errors.Is(err, stream.ErrOutage):
		// A stream refused while the store is down: the stream handler
		// logs the outage once, and every client retries it many times.
		log.Debug().Err(err).Int("status", status).Msg("stream refused during a store outage")
	case status >= http.StatusInternalServerError:
		log.Error().Err(err).Int("status", status).Msg("request failed")
	case status == statusClientClosed:
		log.Debug().Err(err).Msg("client went away")
	default:
		log.Debug().Err(err).Int("status", status).Msg("request rejected")
	}
	switch {
	case retryAfter(status, code):
		w.Header().Set("Retry-After", strconv.Itoa(int(retryAfterWait.Seconds())))
	case status == http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="nqd"`)
	}
	writeJSON(w, r, status, body)
}

// writeJSON encodes v before writing anything, so that an encoding failure
// can still become a 500.
func writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	b, err := encodeJSON(v)
	if err != nil {
		hlog.FromRequest(r).Error().Err(err).Msg("encode response")
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"Internal error."}}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// encodeJSON writes v and a newline. A Marshaler (a single event, the hot
// path) writes itself: through an Encoder its output would be parsed and
// compacted a second time.
func encodeJSON(v any) ([]byte, error) {
	if m, ok := v.(json.Marshaler); ok {
		b, err := m.MarshalJSON()
		return append(b, '\n'), err
	}
	var buf bytes.Buffer
	err := json.NewEncoder(&buf).Encode(v)
	return buf.Bytes(), err
}

func notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, r, nqd.Errorf(nqd.CodeNotFound, "No route for %s %s.", r.Method, r.URL.Path))
}

// methodNotAllowed answers 405 with the Allow header, which chi only sets for
// its own default handler; it asks the root router which methods match.
func methodNotAllowed(root chi.Routes) http.HandlerFunc {
	methods := []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}
	return func(w http.ResponseWriter, r *http.Request) {
		var allowed []string
		for _, m := range methods {
			if root.Match(chi.NewRouteContext(), m, r.URL.Path) {
				allowed = append(allowed, m)
			}
		}
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, r, nqd.Errorf(nqd.CodeMethodNotAllowed, "%s is not allowed on %s.", r.Method, r.URL.Path))
	}
}

// recoverer turns a panic into a logged 500 in the error shape instead of
// a dropped connection.
func recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			rec := recover()
			if rec == nil {
				return
			}
			if rec == http.ErrAbortHandler {
				// net/http's way to abort a response; it must reach the server.
				panic(rec)
			}
			hlog.FromRequest(r).Error().
				Interface("panic", rec).
				Bytes("stack", debug.Stack()).
				Msg("handler panicked")
			writeError(w, r, errors.New("handler panicked"))
		}()
		next.ServeHTTP(w, r)
	})
}
