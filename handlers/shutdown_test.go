package handlers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/store"
)

// claimWatch tells when the engine first found no job for a claim, which
// it then waits for.
type claimWatch struct {
	engine.Store
	claiming chan struct{}
}

func (s claimWatch) Claim(ctx context.Context, queues []string, now, leaseUntil int64, lease string, max int) ([]store.Job, error) {
	jobs, err := s.Store.Claim(ctx, queues, now, leaseUntil, lease, max)
	select {
	case s.claiming <- struct{}{}:
	default: // told already; the engine polls again while it waits
	}
	return jobs, err
}

// TestClaimEndsOnShutdown: a claim waiting for jobs is answered 503 with
// Retry-After as soon as the server stops long polls, and so is every later
// claim, without waiting.
func TestClaimEndsOnShutdown(t *testing.T) {
	var api *handlers.API
	claiming := make(chan struct{}, 1)
	h := newTestAPI(t, func(d *handlers.Deps) {
		d.Engine = engine.New(claimWatch{Store: d.Store.(engine.Store), claiming: claiming}, engine.Options{Logger: d.Log})
		api = handlers.New(*d)
	})
	h.h = api.Routes() // the API whose long polls the test stops

	const claim = `{"queues":["q1"],"waitMs":30000}`
	answered := make(chan *httptest.ResponseRecorder)
	go func() { answered <- h.do(t, post("/api/_workers/claim", claim)) }()
	<-claiming
	api.StopLongPolls()
	select {
	case rec := <-answered:
		wantStatus(t, rec, http.StatusServiceUnavailable)
		if rec.Header().Get("Retry-After") == "" || decode[errorBody](t, rec).Error.Code != nqd.CodeUnavailable {
			t.Errorf("answer %v %s, want unavailable with Retry-After", rec.Header(), rec.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting claim was not answered once long polls stopped")
	}
	wantStatus(t, h.do(t, post("/api/_workers/claim", claim)), http.StatusServiceUnavailable)
}
