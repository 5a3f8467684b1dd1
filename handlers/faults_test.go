package handlers_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/store"
)

// faultyStore is the real store with some methods replaced, to inject the
// failures a working store does not produce.
type faultyStore struct {
	handlers.Store
	append  func(ctx context.Context) error
	rangeFn func(ctx context.Context) error
	ping    func(ctx context.Context) error
}

func (s faultyStore) Append(ctx context.Context, c store.Context, evs []event.Event, opts store.AppendOptions) (store.AppendResult, error) {
	if s.append != nil {
		return store.AppendResult{}, s.append(ctx)
	}
	return s.Store.Append(ctx, c, evs, opts)
}

func (s faultyStore) Range(ctx context.Context, c store.Context, q store.RangeQuery) ([]event.Event, error) {
	if s.rangeFn != nil {
		return nil, s.rangeFn(ctx)
	}
	return s.Store.Range(ctx, c, q)
}

func (s faultyStore) Ping(ctx context.Context) error {
	if s.ping != nil {
		return s.ping(ctx)
	}
	return s.Store.Ping(ctx)
}

func withFaults(f faultyStore) func(*handlers.Deps) {
	return func(d *handlers.Deps) {
		f.Store = d.Store
		d.Store = f
	}
}

func TestStoreFailures(t *testing.T) {
	const secret = "bolt: page 7 corrupt at /var/lib/nqd"
	unavailable := func(context.Context) error { return errors.Join(store.ErrUnavailable, errors.New(secret)) }
	tests := []struct {
		name       string
		faults     faultyStore
		limits     handlers.Limits
		req        request
		wantStatus int
		wantCode   string
	}{
		{"not ready", faultyStore{ping: unavailable}, handlers.Limits{}, get("/readyz"), 503, "unavailable"},
		{"ping fails oddly", faultyStore{ping: func(context.Context) error { return errors.New(secret) }}, handlers.Limits{}, get("/readyz"), 503, "unavailable"},
		{"append unavailable", faultyStore{append: unavailable}, handlers.Limits{}, post("/api/_events/flow/run-1", `{"kind":"a"}`), 503, "unavailable"},
		{"append outcome unknown", faultyStore{append: func(context.Context) error {
			return errors.Join(store.ErrOutcomeUnknown, context.DeadlineExceeded, errors.New(secret))
		}}, handlers.Limits{}, post("/api/_events/flow/run-1", `{"kind":"a"}`), 504, "outcome_unknown"},
		{"append fails oddly", faultyStore{append: func(context.Context) error { return errors.New(secret) }}, handlers.Limits{}, post("/api/_events/flow/run-1", `{"kind":"a"}`), 500, "internal"},
		{"append panics", faultyStore{append: func(context.Context) error { panic(secret) }}, handlers.Limits{}, post("/api/_events/flow/run-1", `{"kind":"a"}`), 500, "internal"},
		{"read outlives the timeout", faultyStore{rangeFn: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
			handlers.Limits{RequestTimeout: 20 * time.Millisecond}, get("/api/_events/flow/run-1"), 504, "timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newTestAPI(t, withFaults(tt.faults), func(d *handlers.Deps) { d.Limits = tt.limits })
			if tt.req.method == http.MethodGet && tt.faults.rangeFn != nil {
				// Range is only asked for a context that has events.
				if _, err := api.store.Append(t.Context(), store.Context{Type: "flow", ID: "run-1"}, []event.Event{{Kind: "a", Subject: "run-1"}}, store.AppendOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			rec := api.do(t, tt.req)
			wantStatus(t, rec, tt.wantStatus)
			if code := decode[errorBody](t, rec).Error.Code; code != tt.wantCode {
				t.Errorf("code %q, want %q", code, tt.wantCode)
			}
			if strings.Contains(rec.Body.String(), "bolt") {
				t.Errorf("the store's error leaked into the body: %s", rec.Body)
			}
			if got, want := rec.Header().Get("Retry-After") != "", tt.wantStatus == 503 || tt.wantCode == "outcome_unknown"; got != want {
				t.Errorf("Retry-After present %v, want %v", got, want)
			}
		})
	}
}
