package handlers_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/handlers"
)

// TestEnumeratedParams: a parameter that takes one of a few values refuses
// any other, naming itself and the values it takes.
func TestEnumeratedParams(t *testing.T) {
	api := newTestAPI(t, func(d *handlers.Deps) { d.Engine = engine.New(d.Store.(engine.Store), engine.Options{Logger: d.Log}) })
	wantStatus(t, api.do(t, request{method: http.MethodPut, target: "/api/_flows/demo", body: `{"entry":"a","steps":{"a":{"queue":"q1"}}}`}), http.StatusOK)
	wantStatus(t, api.do(t, post("/api/_flows/demo/start", `{}`)), http.StatusOK)
	for _, tt := range []struct {
		target, param string
		allowed       []string
	}{
		{"/api/_flows/demo/runs?status=bogus", "status", []string{"running", "awaiting", "completed", "failed", "cancelled"}},
		{"/api/_flows/demo/runs?status=Running", "status", []string{"running"}},
		{"/api/_flows/demo/runs?status=", "status", []string{"running"}},
		{"/api/_events/flow/list?name=demo&status=bogus", "status", []string{"running", "cancelled"}},
		{"/api/_events/flow/list?name=demo&status=", "status", []string{"running"}},
		{"/api/_events/flow/run-1?source=bogus", "source", []string{"live", "archive"}},
		{"/api/_flows/waits?kind=bogus", "kind", []string{"time", "event", "trigger"}},
	} {
		rec := api.do(t, get(tt.target))
		wantStatus(t, rec, http.StatusBadRequest)
		rule := decode[errorBody](t, rec).Error.Fields[tt.param]
		for _, v := range tt.allowed {
			if !strings.Contains(rule, v) {
				t.Errorf("%s: %s: %q does not name %s", tt.target, tt.param, rule, v)
			}
		}
	}
	// An allowed value still answers.
	for _, target := range []string{"/api/_flows/demo/runs?status=running", "/api/_events/flow/list?name=demo&status=running"} {
		rec := api.do(t, get(target))
		wantStatus(t, rec, http.StatusOK)
		if !strings.Contains(rec.Body.String(), `"total":1`) {
			t.Errorf("%s: %s, want the one running run", target, rec.Body)
		}
	}
}
