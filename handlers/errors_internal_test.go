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

	"github.com/nqd-dev/nqd/archive"
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
		{"not found", fmt.Errorf("redisstore: %w: %s", store.ErrNotFound, detail), 404, CodeNotFound, nil},
		{"conflict", fmt.Errorf("redisstore: %w: %s", store.ErrConflict, detail), 409, CodeConflict, nil},
		{"invalid", fmt.Errorf("redisstore: %w: %s", store.ErrInvalid, detail), 400, CodeBadRequest, nil},
		{"unavailable", fmt.Errorf("redisstore: %w: %s", store.ErrUnavailable, detail), 503, CodeUnavailable, nil},
		{"unavailable after a deadline", fmt.Errorf("%w: %w", store.ErrUnavailable, context.DeadlineExceeded), 503, CodeUnavailable, nil},
		{"closed", fmt.Errorf("redisstore: %w", store.ErrClosed), 503, CodeUnavailable, nil},
		{"deadline", fmt.Errorf("read %s: %w", detail, context.DeadlineExceeded), 504, CodeTimeout, nil},
		{"canceled", fmt.Errorf("read %s: %w", detail, context.Canceled), 499, CodeCanceled, nil},
		{"body too large", fmt.Errorf("decode: %w", &http.MaxBytesError{Limit: 64}), 413, CodeTooLarge, nil},
		{"validation", verrs, 400, CodeValidation, map[string]string{
			"kind":    "must be a dot.case event kind such as step.completed",
			"attempt": "at least 0",
		}},
		{"api error", invalidField("limit", "must be an integer"), 400, CodeValidation, map[string]string{"limit": "must be an integer"}},
		{"corrupt archive", fmt.Errorf("archive: flow:r1: checksum differs: %w", archive.ErrCorrupt), 502, CodeArchiveCorrupt, nil},
		{"anything else", errors.New(detail), 500, CodeInternal, nil},
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
			if got, want := rec.Header().Get("Retry-After") != "", tt.wantStatus == http.StatusServiceUnavailable; got != want {
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
