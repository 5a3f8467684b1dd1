// Package nqd holds what every layer of nqd shares: the error that carries a
// code and a message meant for clients. The store's sentinels, the engine's
// refusals and the API's own answers are all one, so the API answers every
// failure through one table of codes (handlers/errors.go).
package nqd

import (
	"context"
	"errors"
	"fmt"
)

// Error codes: the `code` of the error body (Error in openapi.yaml). Clients
// branch on them; messages are for people.
const (
	CodeBadRequest       = "bad_request"
	CodeValidation       = "validation_failed"
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeConflict         = "conflict"
	CodeGone             = "gone"
	CodeTooLarge         = "too_large"
	CodeUnsupportedMedia = "unsupported_media_type"
	CodeKeyReused        = "idempotency_key_reused"
	CodeKeyInFlight      = "idempotency_key_in_flight"
	CodeRateLimited      = "rate_limited"
	CodeCrossOrigin      = "cross_origin"
	CodeHostNotAllowed   = "host_not_allowed"
	CodeInternal         = "internal"
	CodeArchiveCorrupt   = "archive_corrupt"
	CodeUnavailable      = "unavailable"
	CodeTimeout          = "timeout"
	CodeOutcomeUnknown   = "outcome_unknown"
	CodeCanceled         = "canceled"
	// CodeBodyTimeout is a request body that stopped arriving: the
	// client's pace, not nqd's, so a 408 rather than CodeTimeout's 504.
	CodeBodyTimeout = "request_timeout"

	// CodeUnprocessable is a validation failure of content that was read
	// fine but breaks a schema or a stored definition. Clients see it as
	// CodeValidation; only the status (422 rather than 400) tells the two
	// apart.
	CodeUnprocessable = "unprocessable"
)

// Error is a failure a client may be told about: Code says what kind, Message
// says what went wrong in words safe to show (never a backend's own text).
type Error struct {
	Code    string
	Message string
	// Fields name the offending JSON fields, parameters or places and the
	// rule each breaks; only for validation failures.
	Fields map[string]string
	// Err is a more general error this one also is, such as a store
	// sentinel, so that errors.Is finds it; its text is never shown.
	Err error
}

func (e *Error) Error() string {
	if len(e.Fields) == 0 {
		return e.Code + ": " + e.Message
	}
	return fmt.Sprintf("%s: %s %v", e.Code, e.Message, e.Fields)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an Error of code with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Refine returns an error that is err, with the same code, but a message
// that says more about this case.
func Refine(err error, format string, args ...any) *Error {
	return &Error{Code: ErrorCode(err), Message: fmt.Sprintf(format, args...), Err: err}
}

// ErrorCode returns the code of the first Error in err's chain, CodeTimeout
// or CodeCanceled for a context's end, CodeInternal for anything else, and
// "" for nil.
func ErrorCode(err error) string {
	var e *Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, context.DeadlineExceeded):
		return CodeTimeout
	case errors.Is(err, context.Canceled):
		return CodeCanceled
	}
	return CodeInternal
}

// ErrorMessage returns the message of the first Error in err's chain, or a
// fixed one for any other error: its text may name hosts, keys or queries.
func ErrorMessage(err error) string {
	var e *Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &e):
		return e.Message
	case errors.Is(err, context.DeadlineExceeded):
		return "The request took too long."
	case errors.Is(err, context.Canceled):
		return "The request was canceled."
	}
	return "Internal error."
}
