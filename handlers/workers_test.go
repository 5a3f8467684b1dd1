package handlers_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/reducers"
	"github.com/nqd-dev/nqd/registry"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
)

type workersAPI struct {
	*testAPI
	reg *registry.Registry
}

// newWorkersAPI is the real router with a worker registry, the store, the
// registry and the API on one clock, and a flow whose first step waits on
// the queue "default".
func newWorkersAPI(t *testing.T) workersAPI {
	t.Helper()
	clock := testkit.NewClock(epoch)
	log := testkit.Logger(t)
	st := bolttest.Open(t, boltstore.Options{Now: clock.Now, Logger: log})
	e := engine.New(st, engine.Options{Now: clock.Now, Logger: log})
	d := &flows.Definition{Name: "gf", Entry: "first", Steps: map[string]flows.Step{"first": {Queue: "default"}}}
	if err := e.PutDefinition(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	reg := registry.New(st, st, registry.Options{Now: clock.Now, Log: log})
	api := handlers.New(handlers.Deps{Store: st, State: newStates(t, st), Engine: e, KV: st, Workers: reg, Log: log, Now: clock.Now})
	return workersAPI{&testAPI{h: api.Routes(), store: st, clock: clock}, reg}
}

type workersList struct {
	Workers     []reducers.Worker
	Count       int
	Active      int
	LastEventID string
}

func (a workersAPI) workers(t *testing.T, query string) workersList {
	t.Helper()
	rec := a.do(t, get("/api/_workers"+query))
	wantStatus(t, rec, http.StatusOK)
	return decode[workersList](t, rec)
}

type queueServed struct {
	Workers  int
	Unserved bool
}

func (a workersAPI) served(t *testing.T) queueServed {
	t.Helper()
	rec := a.do(t, get("/api/_queues/default/metrics"))
	wantStatus(t, rec, http.StatusOK)
	return decode[queueServed](t, rec)
}

func workerHeaders(id string) http.Header {
	return http.Header{
		"Nqd-Worker-Id": {id}, "Nqd-Worker-Name": {"resizer"}, "Nqd-Worker-Sdk": {"python"},
		"Nqd-Worker-Version": {"0.4.0"}, "Nqd-Worker-Host": {"box-2"}, "Nqd-Worker-Concurrency": {"4"},
	}
}

// An HTTP worker's claim registers it from its headers; a worker channel's
// hello and goodbye show the same way; a queue with jobs and no worker is
// flagged until a worker serves it.
func TestWorkersListsHTTPAndChannelWorkers(t *testing.T) {
	api := newWorkersAPI(t)
	if got := api.workers(t, ""); got.Count != 0 || got.Workers == nil {
		t.Fatalf("empty registry = %+v, want an empty list", got)
	}
	wantStatus(t, api.do(t, post("/api/_queues/default/job", `{"name":"gf","data":{}}`)), http.StatusOK)
	if got := api.served(t); got.Workers != 0 || !got.Unserved {
		t.Fatalf("queue with a waiting job and no worker = %+v, want unserved", got)
	}

	claim := post("/api/_workers/claim", `{"queues":["default"],"max":3}`)
	claim.header = workerHeaders("py-1")
	wantStatus(t, api.do(t, claim), http.StatusOK)
	got := api.workers(t, "")
	if got.Count != 1 || got.Active != 1 {
		t.Fatalf("after a claim: %+v", got)
	}
	w := got.Workers[0]
	want := reducers.Worker{ID: "py-1", Name: "resizer", SDK: "python", Version: "0.4.0", Host: "box-2",
		Queues: []string{"default"}, Concurrency: 4, InFlight: 1, Transport: registry.TransportHTTP, Status: reducers.WorkerActive}
	w.FirstSeen, w.LastSeen = reducers.Time{}, reducers.Time{}
	if diff := cmp.Diff(want, w); diff != "" {
		t.Fatalf("worker (-want +got):\n%s", diff)
	}

	ch := registry.Hello{ID: "go-1", Name: "demo", SDK: "go", Version: "1.0.0", Host: "box-1",
		Queues: []string{"default", "other"}, Concurrency: 8, Transport: registry.TransportChannel}
	if err := api.reg.Arrive(t.Context(), ch); err != nil {
		t.Fatal(err)
	}
	if got := api.served(t); got.Workers != 2 || got.Unserved {
		t.Fatalf("queue served by two workers = %+v", got)
	}
	api.clock.Add(time.Second)
	if err := api.reg.Leave(t.Context(), "go-1", registry.ReasonClosed); err != nil {
		t.Fatal(err)
	}
	if got := api.workers(t, "?status=left"); got.Count != 1 || got.Workers[0].ID != "go-1" || got.Workers[0].Reason != registry.ReasonClosed {
		t.Fatalf("left workers = %+v", got)
	}
	if got := api.workers(t, "?queue=other"); got.Count != 1 || got.Active != 0 {
		t.Fatalf("workers of queue other = %+v", got)
	}
	// Time travel: before go-1 left, both were active.
	before := api.workers(t, "?at="+epoch.Format(time.RFC3339Nano))
	if before.Active != 2 {
		t.Fatalf("registry at %v = %+v, want two active", epoch, before)
	}
	// The registry is a stream like any other.
	rec := api.do(t, get("/api/_events/registry/workers"))
	wantStatus(t, rec, http.StatusOK)
	if n := decode[struct{ EventCount int }](t, rec).EventCount; n != 3 {
		t.Fatalf("registry stream holds %d events, want 3 (two arrivals, one departure)", n)
	}

	// A worker heard from no more is shown lost even before a sweep.
	api.clock.Add(api.reg.StaleAfter() + time.Second)
	if got := api.workers(t, "?status=lost"); got.Count != 1 || got.Workers[0].ID != "py-1" {
		t.Fatalf("lost workers = %+v", got)
	}
	if got := api.served(t); got.Workers != 0 || !got.Unserved {
		t.Fatalf("queue whose worker went silent = %+v, want unserved", got)
	}
}

// A claim without worker headers is listed under an id made from its
// address and User-Agent; bad headers and filters are refused, naming them.
func TestWorkersHeadersAndFilters(t *testing.T) {
	api := newWorkersAPI(t)
	claim := post("/api/_workers/claim", `{"queues":["default"]}`)
	claim.header = http.Header{"User-Agent": {"curl/8.5.0"}}
	wantStatus(t, api.do(t, claim), http.StatusOK)
	got := api.workers(t, "")
	if got.Count != 1 || got.Workers[0].Name != "curl/8.5.0" || len(got.Workers[0].ID) != len("http-")+12 {
		t.Fatalf("anonymous worker = %+v", got)
	}
	wantStatus(t, api.do(t, claim), http.StatusOK)
	if got := api.workers(t, ""); got.Count != 1 {
		t.Fatalf("the same client claiming again made %d workers", got.Count)
	}

	for _, tc := range []struct{ header, value string }{
		{"Nqd-Worker-Id", "a:b"},
		{"Nqd-Worker-Concurrency", "many"},
		{"Nqd-Worker-Concurrency", "-1"},
		{"Nqd-Worker-Version", "1\x7f"},
	} {
		bad := post("/api/_workers/claim", `{"queues":["default"]}`)
		bad.header = http.Header{tc.header: {tc.value}}
		rec := api.do(t, bad)
		wantStatus(t, rec, http.StatusBadRequest)
		if f := decode[errorBody](t, rec).Error.Fields; f[tc.header] == "" {
			t.Errorf("%s: %q: fields %v do not name the header", tc.header, tc.value, f)
		}
	}
	for _, q := range []string{"?status=gone", "?queue=a:b", "?at=yesterday"} {
		wantStatus(t, api.do(t, get("/api/_workers"+q)), http.StatusBadRequest)
	}
}

// An HTTP worker that says goodbye is shown left at once; a goodbye without
// the id header is refused.
func TestWorkerGoodbye(t *testing.T) {
	api := newWorkersAPI(t)
	claim := post("/api/_workers/claim", `{"queues":["default"]}`)
	claim.header = workerHeaders("ts-1")
	wantStatus(t, api.do(t, claim), http.StatusOK)
	bye := post("/api/_workers/goodbye", `{}`)
	bye.header = http.Header{"Nqd-Worker-Id": {"ts-1"}}
	wantStatus(t, api.do(t, bye), http.StatusOK)
	wantStatus(t, api.do(t, bye), http.StatusOK)
	got := api.workers(t, "")
	if got.Count != 1 || got.Workers[0].Status != reducers.WorkerLeft || got.Workers[0].Reason != registry.ReasonClosed {
		t.Fatalf("after goodbye: %+v", got)
	}
	rec := api.do(t, post("/api/_workers/goodbye", `{}`))
	wantStatus(t, rec, http.StatusBadRequest)
	if f := decode[errorBody](t, rec).Error.Fields; f["Nqd-Worker-Id"] == "" {
		t.Fatalf("fields %v do not name the header", f)
	}
}
