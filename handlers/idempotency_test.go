package handlers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/store"
)

// onBothStores runs test on the embedded store and on Redis.
func onBothStores(t *testing.T, test func(t *testing.T, newAPI func(opts ...func(*handlers.Deps)) *testAPI)) {
	t.Run("embedded", func(t *testing.T) {
		test(t, func(opts ...func(*handlers.Deps)) *testAPI { return newTestAPI(t, opts...) })
	})
	t.Run("redis", func(t *testing.T) {
		test(t, func(opts ...func(*handlers.Deps)) *testAPI { return newRedisTestAPI(t, opts...) })
	})
}

func withKey(req request, key string) request {
	req.header = http.Header{"Idempotency-Key": {key}}
	return req
}

func (a *testAPI) length(t *testing.T, c store.Context) int64 {
	t.Helper()
	info, err := a.store.Info(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return info.Length
}

func TestIdempotencyKeyReusedForAnotherBody(t *testing.T) {
	onBothStores(t, func(t *testing.T, newAPI func(...func(*handlers.Deps)) *testAPI) {
		api := newAPI()
		c := store.Context{Type: "flow", ID: "run-1"}
		const target = "/api/_events/flow/run-1"
		first := api.do(t, withKey(post(target, `{"kind":"a.b","data":{"n":1}}`), "k1"))
		wantStatus(t, first, http.StatusCreated)
		for name, body := range map[string]string{
			"other data":  `{"kind":"a.b","data":{"n":2}}`,
			"other kind":  `{"kind":"a.c","data":{"n":1}}`,
			"as a batch":  `{"events":[{"kind":"a.b","data":{"n":1}},{"kind":"a.b"}]}`,
			"other field": `{"kind":"a.b","data":{"n":1},"step":"s"}`,
		} {
			rec := api.do(t, withKey(post(target, body), "k1"))
			wantStatus(t, rec, http.StatusUnprocessableEntity)
			if code := decode[errorBody](t, rec).Error.Code; code != nqd.CodeKeyReused {
				t.Errorf("%s: code %q, want %q", name, code, nqd.CodeKeyReused)
			}
		}
		if n := api.length(t, c); n != 1 {
			t.Errorf("stored %d events, want the first only", n)
		}
		// The same request again, spelled with the other aliases, is a retry.
		again := api.do(t, withKey(post(target, `{"type":"a.b","data":{"n":1}}`), "k1"))
		wantStatus(t, again, http.StatusCreated)
		if again.Header().Get("Idempotent-Replayed") != "true" || again.Body.String() != first.Body.String() {
			t.Errorf("retry: %s %v, want the first answer replayed: %s", again.Body, again.Header(), first.Body)
		}
	})
}

// gateStore holds every Append until release is closed, telling entered
// when one arrives.
type gateStore struct {
	handlers.Store
	entered chan struct{}
	release chan struct{}
}

func (s gateStore) Append(ctx context.Context, c store.Context, evs []event.Event, opts store.AppendOptions) (store.AppendResult, error) {
	s.entered <- struct{}{}
	<-s.release
	return s.Store.Append(ctx, c, evs, opts)
}

func TestIdempotencyKeyInFlight(t *testing.T) {
	onBothStores(t, func(t *testing.T, newAPI func(...func(*handlers.Deps)) *testAPI) {
		gate := gateStore{entered: make(chan struct{}, 1), release: make(chan struct{})}
		api := newAPI(func(d *handlers.Deps) { gate.Store = d.Store; d.Store = gate })
		const target = "/api/_events/flow/run-1"
		req := withKey(post(target, `{"kind":"a.b"}`), "k1")
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- api.do(t, req) }()
		<-gate.entered

		rec := api.do(t, req)
		wantStatus(t, rec, http.StatusConflict)
		if code := decode[errorBody](t, rec).Error.Code; code != nqd.CodeKeyInFlight {
			t.Errorf("code %q, want %q", code, nqd.CodeKeyInFlight)
		}
		// Another key, or another context, is not held up.
		other := make(chan *httptest.ResponseRecorder)
		go func() { other <- api.do(t, withKey(post("/api/_events/flow/run-2", `{"kind":"a.b"}`), "k1")) }()
		<-gate.entered

		close(gate.release)
		wantStatus(t, <-done, http.StatusCreated)
		wantStatus(t, <-other, http.StatusCreated)
		go func() { <-gate.entered }()
		retry := api.do(t, req)
		wantStatus(t, retry, http.StatusCreated)
		if retry.Header().Get("Idempotent-Replayed") != "true" {
			t.Error("the retry after the answer was not a replay")
		}
		if n := api.length(t, store.Context{Type: "flow", ID: "run-1"}); n != 1 {
			t.Errorf("stored %d events, want 1", n)
		}
	})
}

func TestStartKeyReusedForAnotherInput(t *testing.T) {
	onBothStores(t, func(t *testing.T, newAPI func(...func(*handlers.Deps)) *testAPI) {
		api := newAPI(func(d *handlers.Deps) { d.Engine = engine.New(d.Store.(engine.Store), engine.Options{Logger: d.Log}) })
		wantStatus(t, api.do(t, request{method: http.MethodPut, target: "/api/_flows/demo", body: `{"entry":"a","steps":{"a":{"queue":"q1"}}}`}), http.StatusOK)
		first := api.do(t, withKey(post("/api/_flows/demo/start", `{"n": 1}`), "s1"))
		wantStatus(t, first, http.StatusOK)
		rec := api.do(t, withKey(post("/api/_flows/demo/start", `{"n":2}`), "s1"))
		wantStatus(t, rec, http.StatusUnprocessableEntity)
		if code := decode[errorBody](t, rec).Error.Code; code != nqd.CodeKeyReused {
			t.Errorf("code %q, want %q", code, nqd.CodeKeyReused)
		}
		again := api.do(t, withKey(post("/api/_flows/demo/start", `{"n":1}`), "s1"))
		wantStatus(t, again, http.StatusOK)
		if again.Header().Get("Idempotent-Replayed") != "true" || again.Body.String() != first.Body.String() {
			t.Errorf("retry: %s, want %s replayed", again.Body, first.Body)
		}
		runs := decode[struct{ Total int }](t, api.do(t, get("/api/_flows/demo/runs")))
		if runs.Total != 1 {
			t.Errorf("%d runs, want 1", runs.Total)
		}
	})
}
