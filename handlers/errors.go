package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/go-playground/validator/v10"
	"github.com/rs/zerolog/hlog"

	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/store"
)

// Error codes of the error body (Error in openapi.yaml). Clients branch on
// these; messages are for people.
const (
	CodeBadRequest       = "bad_request"
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeRateLimited      = "rate_limited"
	CodeValidation       = "validation_failed"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeConflict         = "conflict"
	CodeTooLarge         = "too_large"
	CodeUnavailable      = "unavailable"
	CodeTimeout          = "timeout"
	CodeCanceled         = "canceled"
	CodeInternal         = "internal"
	CodeArchiveCorrupt   = "archive_corrupt"
	CodeOutcomeUnknown   = "outcome_unknown"
)

// retryAfterSeconds is what a 503 asks clients to wait: long enough for a
// Redis failover or restart to show, short enough not to stall a UI.
const retryAfterSeconds = "5"

// statusClientClosed is nginx's code for a client that left before the
// answer; it only ever reaches the access log.
const statusClientClosed = 499

// Error is an API error: an HTTP status and the body openapi.yaml calls
// Error. Handlers return it for problems they detect themselves; writeError
// derives one for every other error.
type Error struct {
	Status  int
	Code    string
	Message string
	// Fields name the offending JSON fields (or parameters) and the rule each
	// breaks; only for validation errors.
	Fields map[string]string
}

func (e *Error) Error() string {
	if len(e.Fields) == 0 {
		return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
	}
	return fmt.Sprintf("%d %s: %s %v", e.Status, e.Code, e.Message, e.Fields)
}

// badRequest is a 400 for input that cannot be read at all.
func badRequest(format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Message: fmt.Sprintf(format, args...)}
}

// invalid is a 400 naming the fields that break a rule.
func invalid(fields map[string]string) *Error {
	return &Error{
		Status:  http.StatusBadRequest,
		Code:    CodeValidation,
		Message: "The request has invalid fields.",
		Fields:  fields,
	}
}

// invalidField is invalid for a single field.
func invalidField(field, rule string) *Error {
	return invalid(map[string]string{field: rule})
}

// codes maps the errors that come from below the handlers to responses. The
// first match wins. The messages are fixed: store errors never reach bodies.
var codes = []struct {
	err     error
	status  int
	code    string
	message string
}{
	{auth.ErrExpired, http.StatusUnauthorized, CodeUnauthorized, "The token has expired; get a new one."},
	{auth.ErrUnauthenticated, http.StatusUnauthorized, CodeUnauthorized, "A valid token is required: send Authorization: Bearer <token>."},
	{auth.ErrForbidden, http.StatusForbidden, CodeForbidden, "The token does not allow this."},
	// A 502: the archive is storage behind nqd, and its copy is bad; the
	// request was fine and repeating it will not help.
	{archive.ErrCorrupt, http.StatusBadGateway, CodeArchiveCorrupt, "The archived copy does not match its manifest and cannot be read."},
	{store.ErrKeyReused, http.StatusUnprocessableEntity, CodeKeyReused, "The Idempotency-Key was used before for a different request; nothing was stored. Use a new key for a new request."},
	{store.ErrNotFound, http.StatusNotFound, CodeNotFound, "The resource does not exist."},
	{store.ErrConflict, http.StatusConflict, CodeConflict, "The request conflicts with what is stored, such as an idempotency key reused for a different request."},
	{store.ErrInvalid, http.StatusBadRequest, CodeBadRequest, "The request breaks a storage rule."},
	// A 504 like a timeout, and never a 503, which promises nothing was stored.
	{store.ErrOutcomeUnknown, http.StatusGatewayTimeout, CodeOutcomeUnknown, "The store took the write but its answer was lost, and it could not be asked in time whether the write was applied. Retry with the same Idempotency-Key: that is always safe."},
	{store.ErrUnavailable, http.StatusServiceUnavailable, CodeUnavailable, "The store is unavailable and nothing was stored; retry later."},
	{store.ErrClosed, http.StatusServiceUnavailable, CodeUnavailable, "The store is shutting down; retry later."},
	{context.DeadlineExceeded, http.StatusGatewayTimeout, CodeTimeout, "The request took too long."},
	{context.Canceled, statusClientClosed, CodeCanceled, "The request was canceled."},
}

// toError turns any error into the response it gets.
func toError(err error) *Error {
	var apiErr *Error
	if errors.As(err, &apiErr) {
		return apiErr
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return &Error{
			Status:  http.StatusRequestEntityTooLarge,
			Code:    CodeTooLarge,
			Message: fmt.Sprintf("The body is larger than %d bytes.", tooBig.Limit),
		}
	}
	var verrs validator.ValidationErrors
	if errors.As(err, &verrs) {
		return invalid(fieldRules(verrs, ""))
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return &Error{Status: c.status, Code: c.code, Message: c.message}
		}
	}
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "Internal error."}
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

// writeError is the one way a handler answers with an error.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := toError(err)
	log := hlog.FromRequest(r)
	switch {
	case e.Status >= http.StatusInternalServerError && isProbe(r):
		// A failing /readyz is the probe's answer, asked every few
		// seconds; the failure behind it is logged where it happens.
		log.Debug().Err(err).Int("status", e.Status).Msg("not ready")
	case e.Status >= http.StatusInternalServerError:
		log.Error().Err(err).Int("status", e.Status).Msg("request failed")
	case e.Status == statusClientClosed:
		log.Debug().Err(err).Msg("client went away")
	default:
		log.Debug().Err(err).Int("status", e.Status).Msg("request rejected")
	}
	switch {
	case e.Status == http.StatusServiceUnavailable, e.Code == CodeOutcomeUnknown:
		w.Header().Set("Retry-After", retryAfterSeconds)
	case e.Status == http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="nqd"`)
	}
	writeJSON(w, r, e.Status, errorBody{errorFields{Code: e.Code, Message: e.Message, Fields: e.Fields}})
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
	writeError(w, r, &Error{
		Status:  http.StatusNotFound,
		Code:    CodeNotFound,
		Message: fmt.Sprintf("No route for %s %s.", r.Method, r.URL.Path),
	})
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
		writeError(w, r, &Error{
			Status:  http.StatusMethodNotAllowed,
			Code:    CodeMethodNotAllowed,
			Message: fmt.Sprintf("%s is not allowed on %s.", r.Method, r.URL.Path),
		})
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
			writeError(w, r, &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "Internal error."})
		}()
		next.ServeHTTP(w, r)
	})
}
