package handlers_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/nqd-dev/nqd/handlers"
)

func TestReadyzRunsEveryCheck(t *testing.T) {
	liveErr := errors.New("pubsub connection lost")
	healthy := true
	api := newTestAPI(t, func(d *handlers.Deps) {
		d.Ready = []func(context.Context) error{func(context.Context) error {
			if healthy {
				return nil
			}
			return liveErr
		}}
	})
	wantStatus(t, api.do(t, get("/readyz")), http.StatusOK)
	healthy = false
	rec := api.do(t, get("/readyz"))
	wantStatus(t, rec, http.StatusServiceUnavailable)
	if rec.Header().Get("Retry-After") == "" {
		t.Error("a failed readiness check has no Retry-After")
	}
}

func TestCORS(t *testing.T) {
	api := newTestAPI(t, func(d *handlers.Deps) { d.CORSOrigins = []string{"https://ui.example"} })
	preflight := func(origin string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodOptions, "/api/_events/flow/run-1", nil)
		r.Header.Set("Origin", origin)
		r.Header.Set("Access-Control-Request-Method", http.MethodPost)
		r.Header.Set("Access-Control-Request-Headers", "content-type,idempotency-key")
		rec := httptest.NewRecorder()
		api.h.ServeHTTP(rec, r)
		return rec
	}
	if got := preflight("https://ui.example").Header().Get("Access-Control-Allow-Origin"); got != "https://ui.example" {
		t.Errorf("allowed origin: Access-Control-Allow-Origin = %q", got)
	}
	if got := preflight("https://evil.example").Header().Get("Access-Control-Allow-Origin"); got != "" {
		t.Errorf("refused origin: Access-Control-Allow-Origin = %q, want none", got)
	}
	rec := api.do(t, request{method: http.MethodGet, target: "/api/_events/flow/run-1", header: http.Header{"Origin": {"https://ui.example"}}})
	if got := rec.Header().Get("Access-Control-Allow-Origin"); got != "https://ui.example" {
		t.Errorf("simple request from an allowed origin: Access-Control-Allow-Origin = %q", got)
	}
}
