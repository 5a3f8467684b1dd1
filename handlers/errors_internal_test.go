package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/store"
)

func TestWriteError(t *testing.T) {
	const detail = "redis: connection refused 10.0.0.7:6379"
	verrs := New(Deps{}).validate.Struct(record{Kind: "Bad Kind", Attempt: -1})
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantCode   string
		wantFields map[string]string
	}{
		{"not found", fmt.Errorf("redisstore: %w: %s", store.ErrNotFound, detail), 404, nqd.CodeNotFound, nil},
		{"conflict", fmt.Errorf("redisstore: %w: %s", store.ErrConflict, detail), 409, nqd.CodeConflict, nil},
		{"invalid", fmt.Errorf("redisstore: %w: %s", store.ErrInvalid, detail), 400, nqd.CodeBadRequest, nil},
		{"unavailable", fmt.Errorf("redisstore: %w: %s", store.ErrUnavailable, detail), 503, nqd.CodeUnavailable, nil},
		{"unavailable after a deadline", fmt.Errorf("%w: %w", store.ErrUnavailable, context.DeadlineExceeded), 503, nqd.CodeUnavailable, nil},
		{"closed", fmt.Errorf("redisstore: %w", store.ErrClosed), 503, nqd.CodeUnavailable, nil},
		{"deadline", fmt.Errorf("read %s: %w", detail, context.DeadlineExceeded), 504, nqd.CodeTimeout, nil},
		{"canceled", fmt.Errorf("read %s: %w", detail, context.Canceled), 499, nqd.CodeCanceled, nil},
		{"body too large", fmt.Errorf("decode: %w", &http.MaxBytesError{Limit: 64}), 413, nqd.CodeTooLarge, nil},
		{"validation", verrs, 400, nqd.CodeValidation, map[string]string{
			"kind":    "must be a dot.case event kind such as step.completed",
			"attempt": "at least 0",
		}},
		{"api error", invalidField("limit", "must be an integer"), 400, nqd.CodeValidation, map[string]string{"limit": "must be an integer"}},
		{"corrupt archive", fmt.Errorf("archive: flow:r1: checksum differs: %w", archive.ErrCorrupt), 502, nqd.CodeArchiveCorrupt, nil},
		{"anything else", errors.New(detail), 500, nqd.CodeInternal, nil},

		{"token expired", fmt.Errorf("stream token: %w", auth.ErrExpired), 401, nqd.CodeUnauthorized, nil},
		{"token invalid", auth.ErrInvalidToken, 401, nqd.CodeUnauthorized, nil},
		{"scope too weak", fmt.Errorf("%w: token t has scope read", auth.ErrForbidden), 403, nqd.CodeForbidden, nil},
		{"key reused", fmt.Errorf("boltstore: %w", store.ErrKeyReused), 422, nqd.CodeKeyReused, nil},
		{"outcome unknown", fmt.Errorf("redisstore: %w: %w", store.ErrOutcomeUnknown, store.ErrUnavailable), 504, nqd.CodeOutcomeUnknown, nil},
		{"lease lost", engine.ErrLeaseLost, 409, nqd.CodeConflict, nil},
		{"run ended", engine.ErrRunEnded, 409, nqd.CodeConflict, nil},
		{"trigger invalid", engine.ErrTriggerInvalid, 401, nqd.CodeUnauthorized, nil},
		{"trigger gone", engine.ErrTriggerGone, 410, nqd.CodeGone, nil},
		{"report refused", &engine.ReportError{Field: "events[0].kind", Reason: "not a progress event"}, 400, nqd.CodeValidation,
			map[string]string{"events[0].kind": "not a progress event"}},
		{"state breaks the schema", &engine.StateError{Fields: map[string]string{"state.n": "must be a number"}}, 422, nqd.CodeValidation,
			map[string]string{"state.n": "must be a number"}},
		{"payload breaks the schema", &engine.PayloadError{Fields: map[string]string{"payload.ok": "required"}}, 422, nqd.CodeValidation,
			map[string]string{"payload.ok": "required"}},
		{"flow definition invalid", &flows.ValidationError{Fields: map[string]string{"entry": "required"}}, 422, nqd.CodeValidation,
			map[string]string{"entry": "required"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			writeError(rec, httptest.NewRequest(http.MethodGet, "/", nil), tt.err)
			if rec.Code != tt.wantStatus {
				t.Errorf("status %d, want %d", rec.Code, tt.wantStatus)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			retry := tt.wantStatus == http.StatusServiceUnavailable || tt.wantCode == nqd.CodeOutcomeUnknown
			if got, want := rec.Header().Get("Retry-After") != "", retry; got != want {
				t.Errorf("Retry-After present %v, want %v", got, want)
			}
			var body errorBody
			dec := json.NewDecoder(rec.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&body); err != nil {
				t.Fatalf("body is not the error shape: %v", err)
			}
			if body.Error.Code != tt.wantCode || body.Error.Message == "" {
				t.Errorf("error %+v, want code %q and a message", body.Error, tt.wantCode)
			}
			if diff := cmp.Diff(tt.wantFields, body.Error.Fields); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
			if strings.Contains(body.Error.Message, "redis") {
				t.Errorf("message %q leaks the underlying error", body.Error.Message)
			}
		})
	}
}
