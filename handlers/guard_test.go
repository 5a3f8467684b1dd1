package handlers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/store"
)

// stateChanging walks the router and calls try for every route of a
// state-changing method, with its pattern's parameters filled in and a JSON
// body it takes.
func stateChanging(t *testing.T, api *testAPI, try func(key, method, target, body string)) {
	t.Helper()
	n := 0
	err := chi.Walk(api.h.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions {
			return nil
		}
		pattern := strings.TrimSuffix(strings.ReplaceAll(route, "/*/", "/"), "/")
		body := `{"kind":"x.y"}`
		switch {
		case strings.HasSuffix(pattern, "/fail"):
			body = `{"lease":"lease-1","error":"boom"}`
		case strings.HasPrefix(pattern, "/api/_workers/jobs/"):
			body = `{"lease":"lease-1"}`
		case strings.HasSuffix(pattern, "/claim"):
			body = `{"queues":["q1"],"waitMs":0}`
		}
		n++
		try(method+" "+pattern, method, concrete.Replace(pattern), body)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Fatalf("walked %d state-changing routes; is every route mounted?", n)
	}
}

// wantNoRuns fails if any run of the flow demo was started.
func wantNoRuns(t *testing.T, api *testAPI) {
	t.Helper()
	page, err := api.store.IndexList(context.Background(), store.Index{Type: "flow", Name: "demo"}, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if page.Total != 0 {
		t.Errorf("refused requests started %d runs", page.Total)
	}
}

func TestCrossOriginRequestsChangeNothing(t *testing.T) {
	api := newTestAPI(t, withTokens(t, handlers.Access{}))
	putDemoFlow(t, api)
	crossSite := []http.Header{
		{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"http://evil.example"}},
		{"Sec-Fetch-Site": {"same-site"}, "Origin": {"http://evil.localhost:8080"}},
		{"Origin": {"http://evil.example"}}, // an older browser: Origin alone
	}
	stateChanging(t, api, func(key, method, target, body string) {
		for _, h := range crossSite {
			h = h.Clone()
			h.Set("Authorization", "Bearer "+adminSecret)
			rec := api.do(t, request{method: method, target: target, body: body, header: h})
			if rec.Code != http.StatusForbidden || decode[errorBody](t, rec).Error.Code != nqd.CodeCrossOrigin {
				t.Errorf("%s from %v: %d %s, want 403 cross_origin", key, h.Get("Origin"), rec.Code, rec.Body)
			}
		}
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "not a type"} {
			h := http.Header{"Authorization": {"Bearer " + adminSecret}, "Content-Type": {ct}}
			rec := api.do(t, request{method: method, target: target, body: body, header: h})
			if rec.Code != http.StatusUnsupportedMediaType || decode[errorBody](t, rec).Error.Code != nqd.CodeUnsupportedMedia {
				t.Errorf("%s as %s: %d %s, want 415 unsupported_media_type", key, ct, rec.Code, rec.Body)
			}
		}
	})
	wantUnchanged(t, api)
	wantNoRuns(t, api)

	// Reading stays open to any page (CORS decides whether it sees the
	// answer), and a same-origin page and a server pass.
	read := api.do(t, request{method: http.MethodGet, target: "/api/_flows/demo",
		header: http.Header{"Sec-Fetch-Site": {"cross-site"}, "Authorization": {"Bearer " + readSecret}}})
	wantStatus(t, read, http.StatusOK)
	for _, h := range []http.Header{
		{"Sec-Fetch-Site": {"same-origin"}},
		{"Origin": {"http://example.com"}}, // the test request's own Host
		{},
	} {
		h.Set("Authorization", "Bearer "+writeSecret)
		wantStatus(t, api.do(t, request{method: http.MethodPost, target: "/api/_flows/demo/start", body: `{}`, header: h}), http.StatusOK)
	}
	// A POST without a body need not name a media type.
	rec := api.do(t, request{method: http.MethodPost, target: "/api/_flows/demo/start", header: bearer(writeSecret)})
	wantStatus(t, rec, http.StatusOK)
}

func TestTrustedOriginMayChangeState(t *testing.T) {
	api := newTestAPI(t, withTokens(t, handlers.Access{}), func(d *handlers.Deps) {
		d.CORSOrigins = []string{"https://ui.example"}
	})
	putDemoFlow(t, api)
	h := http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://ui.example"}, "Authorization": {"Bearer " + writeSecret}}
	rec := api.do(t, request{method: http.MethodPost, target: "/api/_flows/demo/start", body: `{}`, header: h})
	wantStatus(t, rec, http.StatusOK)
	if got := rec.Header().Get("Access-Control-Allow-Origin"); got != "https://ui.example" {
		t.Errorf("Access-Control-Allow-Origin %q", got)
	}
	h.Set("Origin", "https://other.example")
	rec = api.do(t, request{method: http.MethodPost, target: "/api/_flows/demo/start", body: `{}`, header: h})
	wantStatus(t, rec, http.StatusForbidden)
}

func TestHostCheck(t *testing.T) {
	api := newTestAPI(t, func(d *handlers.Deps) {
		d.CheckHost = true
		d.AllowedHosts = []string{"nqd.internal"}
	})
	for host, want := range map[string]int{
		"127.0.0.1:8080":     http.StatusCreated,
		"[::1]:8080":         http.StatusCreated,
		"localhost:8080":     http.StatusCreated,
		"LOCALHOST":          http.StatusCreated,
		"ui.localhost:3000":  http.StatusCreated,
		"10.1.2.3":           http.StatusCreated,
		"nqd.internal:8080":  http.StatusCreated,
		"NQD.internal.":      http.StatusCreated,
		"rebound.example":    http.StatusForbidden,
		"localhost.evil.com": http.StatusForbidden,
		"nqd.internal.evil":  http.StatusForbidden,
	} {
		r := request{method: http.MethodPost, target: "/api/_events/flow/run-1", body: `{"kind":"x.y"}`}
		rec := api.serveHost(t, r, host)
		if rec.Code != want {
			t.Errorf("Host %q: %d %s, want %d", host, rec.Code, rec.Body, want)
		}
		if want == http.StatusForbidden && decode[errorBody](t, rec).Error.Code != nqd.CodeHostNotAllowed {
			t.Errorf("Host %q: %s, want host_not_allowed", host, rec.Body)
		}
	}
	// Reads are refused too: a rebound page could read them.
	rec := api.serveHost(t, get("/api/_events/flow/run-1"), "rebound.example")
	wantStatus(t, rec, http.StatusForbidden)
	info, err := api.store.Info(context.Background(), store.Context{Type: "flow", ID: "run-1"})
	if err != nil {
		t.Fatal(err)
	}
	if info.Length != 8 {
		t.Errorf("stored %d events, want the 8 accepted", info.Length)
	}

	// Without the check (a non-loopback address, no NQ_ALLOWED_HOSTS) any
	// Host passes.
	open := newTestAPI(t)
	wantStatus(t, open.serveHost(t, get("/api/_events/flow/run-1"), "rebound.example"), http.StatusOK)
}

// serveHost is do with the Host header set.
func (a *testAPI) serveHost(t *testing.T, req request, host string) *httptest.ResponseRecorder {
	t.Helper()
	return a.do(t, request{method: req.method, target: req.target, body: req.body, header: req.header, host: host})
}

// putDemoFlow stores the flow demo: one step on queue q1.
func putDemoFlow(t *testing.T, api *testAPI) {
	t.Helper()
	rec := api.do(t, request{method: http.MethodPut, target: "/api/_flows/demo",
		body: `{"entry":"a","steps":{"a":{"queue":"q1"}}}`, header: bearer(adminSecret)})
	wantStatus(t, rec, http.StatusOK)
}
