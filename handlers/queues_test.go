package handlers_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/testkit"
)

// newQueueAPI serves the API with a flow engine on backend, on the fake
// clock, and a two-step flow "gf" on queue "default".
func newQueueAPI(t *testing.T, backend string) *testAPI {
	t.Helper()
	clock := testkit.NewClock(epoch)
	log := testkit.Logger(t)
	st := newEngineStore(t, backend, clock.Now)
	e := engine.New(st, engine.Options{Now: clock.Now, Logger: log})
	d := &flows.Definition{Name: "gf", Entry: "first", Steps: map[string]flows.Step{
		"first":  {Queue: "default", Emits: []string{"first.done"}},
		"second": {Queue: "default", Subscribes: []string{"first.done"}},
	}}
	if err := e.PutDefinition(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	// The Redis test prefix is random; the UI names streams with "nq".
	api := handlers.New(handlers.Deps{Store: st, Engine: e, KeyPrefix: "nq", Log: log, Now: clock.Now})
	return &testAPI{h: api.Routes(), store: st, clock: clock}
}

var (
	entryIDRe = regexp.MustCompile(`"[0-9]{13}-[0-9]+"`)
	isoTimeRe = regexp.MustCompile(`"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z"`)
)

// normalized replaces what differs between stores and runs (the run id,
// and entry ids and their times, which Redis takes from its own clock) by
// placeholders, so that one golden file holds for both stores.
func normalized(body []byte, run string) []byte {
	s := string(body)
	if run != "" {
		s = strings.ReplaceAll(s, run, "RUN")
	}
	s = entryIDRe.ReplaceAllString(s, `"ENTRY-ID"`)
	s = isoTimeRe.ReplaceAllString(s, `"TIME"`)
	return []byte(s)
}

type claimedJob struct {
	ID, Queue, Step, Lease string
}

func claimOne(t *testing.T, api *testAPI) claimedJob {
	t.Helper()
	rec := api.do(t, post("/api/_workers/claim", `{"queues":["default"],"max":1}`))
	wantStatus(t, rec, http.StatusOK)
	jobs := decode[struct{ Jobs []claimedJob }](t, rec).Jobs
	if len(jobs) != 1 {
		t.Fatalf("claimed %v, want one job", jobs)
	}
	return jobs[0]
}

// TestQueueRoutesGolden walks one run of "gf" through every v0.3 UI queue
// route and the raw stream reads, on both stores, checking each answer
// against its golden file (and, through do, against openapi.yaml).
func TestQueueRoutesGolden(t *testing.T) {
	for _, backend := range []string{"bolt", "redis"} {
		t.Run(backend, func(t *testing.T) {
			api := newQueueAPI(t, backend)
			var run string
			golden := func(name string, rec *httptest.ResponseRecorder, code int) {
				t.Helper()
				wantStatus(t, rec, code)
				checkGolden(t, "queues/"+name, normalized(rec.Body.Bytes(), run))
			}

			rec := api.do(t, post("/api/_queues/default/job", `{"name":"gf","data":{"n":1}}`))
			wantStatus(t, rec, http.StatusOK)
			run = decode[struct{ RunID string }](t, rec).RunID
			golden("add_job", rec, http.StatusOK)
			api.clock.Set(epoch.Add(time.Second))

			golden("list", api.do(t, get("/api/_queues")), http.StatusOK)
			golden("get", api.do(t, get("/api/_queues/default")), http.StatusOK)
			golden("jobs_waiting", api.do(t, get("/api/_queues/default/job")), http.StatusOK)

			golden("pause", api.do(t, post("/api/_queues/default/pause", "")), http.StatusOK)
			golden("metrics_paused", api.do(t, get("/api/_queues/metrics")), http.StatusOK)
			golden("job_paused", api.do(t, get("/api/_queues/default/job/"+run+":first")), http.StatusOK)
			rec = api.do(t, post("/api/_workers/claim", `{"queues":["default"],"max":5}`))
			wantStatus(t, rec, http.StatusOK)
			if jobs := decode[struct{ Jobs []claimedJob }](t, rec).Jobs; len(jobs) != 0 {
				t.Fatalf("a paused queue handed out %v", jobs)
			}
			golden("resume", api.do(t, post("/api/_queues/default/resume", "")), http.StatusOK)

			j := claimOne(t, api)
			base := "/api/_workers/jobs/default/" + j.ID
			wantStatus(t, api.do(t, post(base+"/events", `{"lease":"`+j.Lease+`","events":[
				{"kind":"step.started"},
				{"kind":"log","data":{"level":"info","msg":"fetching"}},
				{"kind":"log.warn","data":{"message":"slow"}},
				{"kind":"emit","data":{"event":"first.done","payload":{"rows":2}}}]}`)), http.StatusOK)
			golden("queue_metrics_active", api.do(t, get("/api/_queues/default/metrics")), http.StatusOK)
			golden("job_active", api.do(t, get("/api/_queues/default/job/"+j.ID)), http.StatusOK)
			golden("job_logs", api.do(t, get("/api/_queues/default/job/"+j.ID+"/logs")), http.StatusOK)
			golden("job_logs_page", api.do(t, get("/api/_queues/default/job/"+j.ID+"/logs?limit=1")), http.StatusOK)
			wantStatus(t, api.do(t, post(base+"/complete", `{"lease":"`+j.Lease+`"}`)), http.StatusOK)

			j = claimOne(t, api)
			wantStatus(t, api.do(t, post("/api/_workers/jobs/default/"+j.ID+"/complete", `{"lease":"`+j.Lease+`"}`)), http.StatusOK)
			api.clock.Set(epoch.Add(2 * time.Second))

			golden("queue_metrics_done", api.do(t, get("/api/_queues/default/metrics")), http.StatusOK)
			golden("jobs_completed", api.do(t, get("/api/_queues/default/job?state=completed")), http.StatusOK)
			golden("job_completed", api.do(t, get("/api/_queues/default/job/"+run+":second")), http.StatusOK)
			golden("stream", api.do(t, get("/api/_events/nq%3Aflow%3A"+run+"?limit=3")), http.StatusOK)
			golden("feed", api.do(t, get("/api/_events/nq%3Aevents?limit=2")), http.StatusOK)

			// Bad input: a clear error, in the error shape, naming the field.
			for _, tc := range []struct {
				req   request
				code  int
				field string
			}{
				{get("/api/_queues/nope"), http.StatusNotFound, ""},
				{get("/api/_queues/default/job?state=done"), http.StatusBadRequest, "state"},
				{get("/api/_queues/default/job/no-colon"), http.StatusBadRequest, "jobId"},
				{get("/api/_queues/default/job/" + run + ":nope"), http.StatusNotFound, ""},
				{post("/api/_queues/default/job", `{"name":"missing"}`), http.StatusUnprocessableEntity, "name"},
				{post("/api/_queues/default/job", `{"name":"gf","opts":{"delay":5}}`), http.StatusUnprocessableEntity, "opts"},
				{post("/api/_queues/default/job", `{"name":"gf","data":[1]}`), http.StatusBadRequest, "data"},
				{post("/api/_queues/a%20b/pause", ""), http.StatusBadRequest, "queue"},
				{get("/api/_events/nq%3Aflow"), http.StatusBadRequest, "key"},
				{get("/api/_events/nq%3Aflow%3Aa%2Fb"), http.StatusBadRequest, "key"},
				{get("/api/_events/other%3Aflow%3A" + run), http.StatusBadRequest, "key"},
				{get("/api/_events/nq%3Akv%3Ax"), http.StatusBadRequest, "key"},
			} {
				rec := api.do(t, tc.req)
				wantStatus(t, rec, tc.code)
				if e := decode[errorBody](t, rec); tc.field != "" && e.Error.Fields[tc.field] == "" {
					t.Errorf("%s %s: %s, want a field error on %s", tc.req.method, tc.req.target, rec.Body, tc.field)
				}
			}
			golden("add_job_refused", api.do(t, post("/api/_queues/default/job", `{"name":"missing"}`)), http.StatusUnprocessableEntity)
		})
	}
}

// TestQueuesFeedEmpty: with no run stored the `nq:events` feed is an empty
// list, not an error.
func TestQueuesFeedEmpty(t *testing.T) {
	api := newQueueAPI(t, "bolt")
	rec := api.do(t, get("/api/_events/nq%3Aevents?limit=100"))
	wantStatus(t, rec, http.StatusOK)
	var got []json.RawMessage
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("feed of an empty store = %s, want []", rec.Body)
	}
}
