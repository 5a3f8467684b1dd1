package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
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

// TestCompletionClaimsNothingOnShutdown: once the server stops long polls, a
// completion that asks for a claim is still stored and answers no jobs,
// leaving the queued ones to be claimed elsewhere.
func TestCompletionClaimsNothingOnShutdown(t *testing.T) {
	ctx := t.Context()
	clock := testkit.NewClock(epoch)
	log := testkit.Logger(t)
	st := bolttest.Open(t, boltstore.Options{Now: clock.Now, Logger: log})
	e := engine.New(st, engine.Options{Now: clock.Now, Logger: log})
	if err := e.PutDefinition(ctx, &flows.Definition{Name: "one", Entry: "start", Steps: map[string]flows.Step{
		"start": {Queue: "q1"},
	}}); err != nil {
		t.Fatal(err)
	}
	api := handlers.New(handlers.Deps{Store: st, Engine: e, Log: log, Now: clock.Now})
	h := &testAPI{h: api.Routes(), store: st, clock: clock}

	if _, err := e.Start(ctx, "one", nil, ""); err != nil {
		t.Fatal(err)
	}
	rec := h.do(t, post("/api/_workers/claim", `{"queues":["q1"]}`))
	wantStatus(t, rec, http.StatusOK)
	j := decode[struct{ Jobs []store.Job }](t, rec).Jobs[0]
	second, err := e.Start(ctx, "one", nil, "")
	if err != nil {
		t.Fatal(err)
	}

	api.StopLongPolls()
	rec = h.do(t, post("/api/_workers/jobs/q1/"+j.ID+"/complete", fmt.Sprintf(`{"lease":%q,"claim":{"queues":["q1"]}}`, j.Lease)))
	wantStatus(t, rec, http.StatusOK)
	if got := strings.TrimSpace(rec.Body.String()); got != `{"status":"ok","jobs":[]}` {
		t.Errorf("complete with a claim during shutdown answered %s, want ok and no jobs", got)
	}
	jobs, err := e.Claim(ctx, []string{"q1"}, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].RunID != second.FlowID {
		t.Errorf("claimable after the shutdown's completion: %+v, want only the second run's job", jobs)
	}
}
