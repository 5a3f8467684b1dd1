package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/snapshots"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// specPath is the API description the router must match.
const specPath = "../openapi.yaml"

// spec is loaded once; kin-openapi documents are safe to read concurrently.
var spec = sync.OnceValues(func() (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(specPath)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, err
	}
	return doc, nil
})

var specRouter = sync.OnceValues(func() (routers.Router, error) {
	doc, err := spec()
	if err != nil {
		return nil, err
	}
	return legacy.NewRouter(doc)
})

func mustSpec(t testing.TB) (*openapi3.T, routers.Router) {
	t.Helper()
	doc, err := spec()
	if err != nil {
		t.Fatalf("load %s: %v", specPath, err)
	}
	router, err := specRouter()
	if err != nil {
		t.Fatalf("route %s: %v", specPath, err)
	}
	return doc, router
}

// testAPI is the real router on a real store, the embedded one unless a
// test asks for Redis.
type testAPI struct {
	h     http.Handler
	store handlers.Store
	// clock is the embedded store's, so that stored ids and times are the
	// same on every run and golden files hold them as they are.
	clock *testkit.Clock
}

// epoch is the fake clock's start: 2025-11-25T21:39:07.116Z.
var epoch = time.UnixMilli(1764106747116).UTC()

// newTestAPI builds the API on a fresh store; each opt may change the deps,
// e.g. wrap the store to inject a failure.
func newTestAPI(t testing.TB, opts ...func(*handlers.Deps)) *testAPI {
	t.Helper()
	clock := testkit.NewClock(epoch)
	log := testkit.Logger(t)
	st := bolttest.Open(t, boltstore.Options{Now: clock.Now, Logger: log})
	deps := handlers.Deps{Store: st, State: newStates(t, st), Engine: engine.New(st, engine.Options{Logger: log}), KV: st, Restorer: st, Log: log}
	for _, opt := range opts {
		opt(&deps)
	}
	api := handlers.New(deps)
	return &testAPI{h: api.Routes(), store: st, clock: clock}
}

// newEngineStore opens a store of backend, "bolt" or "redis", for an engine;
// now is the embedded store's clock (nil for the real one).
func newEngineStore(t testing.TB, backend string, now func() time.Time) engine.Store {
	t.Helper()
	if backend == "redis" {
		return backendtest.OpenRedis(t, "")
	}
	return bolttest.Open(t, boltstore.Options{Now: now, Logger: testkit.Logger(t)})
}

// newRedisTestAPI builds the API on the shared test Redis, under a key prefix
// of its own; opts work as in newTestAPI.
func newRedisTestAPI(t testing.TB, opts ...func(*handlers.Deps)) *testAPI {
	t.Helper()
	log := testkit.Logger(t)
	st := backendtest.OpenRedis(t, "")
	deps := handlers.Deps{Store: st, State: newStates(t, st), Engine: engine.New(st, engine.Options{Logger: log}), KV: st, Restorer: st, Log: log}
	for _, opt := range opts {
		opt(&deps)
	}
	return &testAPI{h: handlers.New(deps).Routes(), store: st}
}

// newStates is the snapshot cache wiring gives the API, on st.
func newStates(t testing.TB, st snapshots.Reader) *snapshots.Cache {
	cp, _ := st.(store.Checkpointer)
	c := snapshots.New(st, snapshots.Options{Checkpoints: cp, CheckpointEvery: snapshots.DefaultCheckpointEvery, Logger: testkit.Logger(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// request is one HTTP call a test makes.
type request struct {
	method string
	target string
	body   string
	header http.Header
	host   string // the Host header, when not the default example.com
	remote string // the peer's address, when not the default 192.0.2.1:1234
}

// do serves req through the router and checks the answer against
// openapi.yaml, so every test also tests the spec.
func (a *testAPI) do(t testing.TB, req request) *httptest.ResponseRecorder {
	t.Helper()
	var body io.Reader
	if req.body != "" {
		body = strings.NewReader(req.body)
	}
	r := httptest.NewRequest(req.method, req.target, body)
	if req.body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range req.header {
		r.Header[k] = vs
	}
	if req.host != "" {
		r.Host = req.host
	}
	if req.remote != "" {
		r.RemoteAddr = req.remote
	}
	rec := httptest.NewRecorder()
	a.h.ServeHTTP(rec, r)
	checkSpec(t, r, req.body, rec)
	if rec.Header().Get("X-Request-ID") == "" {
		t.Errorf("%s %s: no X-Request-ID header", req.method, req.target)
	}
	return rec
}

func post(target, body string) request {
	return request{method: http.MethodPost, target: target, body: body}
}
func get(target string) request { return request{method: http.MethodGet, target: target} }

// checkSpec validates a response against openapi.yaml, and a request the
// server accepted as well, so the spec describes what nqd takes. Answers to
// requests the spec has no route for (404, 405) must still have the Error
// shape.
func checkSpec(t testing.TB, r *http.Request, body string, rec *httptest.ResponseRecorder) {
	t.Helper()
	doc, router := mustSpec(t)
	route, params, err := router.FindRoute(r)
	if err != nil {
		if rec.Code != http.StatusNotFound && rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: no route in the spec, yet answered %d", r.Method, r.URL, rec.Code)
		}
		var v any
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatalf("%s %s: body is not JSON: %v\n%s", r.Method, r.URL, err, rec.Body)
		}
		if err := doc.Components.Schemas["Error"].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			t.Errorf("%s %s: body does not match Error: %v", r.Method, r.URL, err)
		}
		return
	}
	// 404 and 405 fall to `default`: the spec router takes a missing path
	// segment for an empty parameter, where chi finds no route.
	if c := rec.Code; c >= 400 && c < 500 && c != http.StatusNotFound && c != http.StatusMethodNotAllowed &&
		route.Operation.Responses.Status(c) == nil {
		t.Errorf("%s %s: status %d is not listed in the spec", r.Method, r.URL, c)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route},
		Status:                 rec.Code,
		Header:                 rec.Header(),
		Body:                   io.NopCloser(bytes.NewReader(rec.Body.Bytes())),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s %s: answer %d does not match the spec: %v\n%s", r.Method, r.URL, rec.Code, err, rec.Body)
	}
	if rec.Code < 300 && !refusedInBody(rec.Body.Bytes()) {
		again := r.Clone(context.Background())
		again.Body = io.NopCloser(strings.NewReader(body))
		reqIn := &openapi3filter.RequestValidationInput{Request: again, PathParams: params, Route: route,
			// The route tests check tokens themselves; the spec's security
			// is documentation here.
			Options: &openapi3filter.Options{MultiError: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
		if err := openapi3filter.ValidateRequest(context.Background(), reqIn); err != nil {
			t.Errorf("%s %s: accepted a request the spec rejects: %v\n%s", r.Method, r.URL, err, body)
		}
	}
}

// refusedInBody reports whether a 200 answer is a refusal in the body
// ({error, statusCode}, as the trigger mutations answer): such a request
// was not accepted.
func refusedInBody(body []byte) bool {
	var r struct {
		Error      *string `json:"error"`
		StatusCode int     `json:"statusCode"`
	}
	return json.Unmarshal(body, &r) == nil && r.Error != nil && r.StatusCode >= 400
}

// errorBody is the error shape of openapi.yaml (Error).
type errorBody struct {
	Error struct {
		Code    string            `json:"code"`
		Message string            `json:"message"`
		Fields  map[string]string `json:"fields"`
	} `json:"error"`
}

func decode[T any](t testing.TB, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("decode %T: %v\n%s", v, err, rec.Body)
	}
	return v
}

// wantStatus fails the test unless rec has status code.
func wantStatus(t testing.TB, rec *httptest.ResponseRecorder, code int) {
	t.Helper()
	if rec.Code != code {
		t.Fatalf("status %d, want %d; body %s", rec.Code, code, rec.Body)
	}
}

// checkGolden compares got, indented, with testdata/<name>.golden.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, got, "", "  "); err != nil {
		t.Fatalf("indent %s: %v\n%s", name, err, got)
	}
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), buf.String()); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}
}

func timeMS(n int) time.Duration { return time.Duration(n) * time.Millisecond }
