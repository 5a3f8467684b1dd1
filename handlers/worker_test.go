package handlers_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/store"
)

// TestWorkerReportsRepeat: the reports of the worker protocol are safe to
// repeat for the same lease, and a refused one names the field.
func TestWorkerReportsRepeat(t *testing.T) {
	for _, backend := range []string{"bolt", "redis"} {
		t.Run(backend, func(t *testing.T) {
			api, e, st := newAwaitAPI(t, backend)
			s, err := e.Start(t.Context(), "approve", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			rec := api.do(t, post("/api/_workers/claim", `{"queues":["q1"],"max":1}`))
			wantStatus(t, rec, http.StatusOK)
			claimed := decode[struct{ Jobs []store.Job }](t, rec)
			if len(claimed.Jobs) != 1 {
				t.Fatalf("claimed %+v", claimed.Jobs)
			}
			j := claimed.Jobs[0]
			base := "/api/_workers/jobs/q1/" + j.ID
			lease := fmt.Sprintf(`"lease":%q`, j.Lease)

			bad := api.do(t, post(base+"/events", `{`+lease+`,"events":[{"kind":"log"},{"kind":"step.completed"}]}`))
			wantStatus(t, bad, http.StatusBadRequest)
			if f := decode[errorBody](t, bad).Error.Fields["events[1].kind"]; f == "" {
				t.Errorf("refused report names no field events[1].kind: %s", bad.Body)
			}

			report := post(base+"/events", `{`+lease+`,"events":[{"kind":"log","data":{"msg":"once"}},{"kind":"emit","data":{"event":"started"}}]}`)
			report.header = http.Header{"Idempotency-Key": {"r-1"}}
			type stored struct{ Events []struct{ ID string } }
			first := api.do(t, report)
			wantStatus(t, first, http.StatusOK)
			second := api.do(t, report)
			wantStatus(t, second, http.StatusOK)
			a, b := decode[stored](t, first), decode[stored](t, second)
			// The emit stored itself and the await it made due, with the
			// log before it; a repeat answers all three again and stores
			// nothing.
			if len(a.Events) != 3 || !reflect.DeepEqual(a, b) {
				t.Errorf("repeated report answered %+v, first %+v; want the first one's three events", b, a)
			}

			for range 2 {
				wantStatus(t, api.do(t, post(base+"/complete", `{`+lease+`,"result":{"ok":true}}`)), http.StatusOK)
			}
			conflict := api.do(t, post(base+"/fail", `{`+lease+`,"error":"late"}`))
			wantStatus(t, conflict, http.StatusConflict)

			evs, err := st.Range(t.Context(), store.Context{Type: "flow", ID: s.FlowID}, store.RangeQuery{})
			if err != nil {
				t.Fatal(err)
			}
			n := map[string]int{}
			for _, ev := range evs {
				n[ev.Kind]++
			}
			if n["log"] != 1 || n["emit"] != 1 || n["step.completed"] != 1 {
				b, _ := json.Marshal(n)
				t.Errorf("stored kinds %s; want one log, one emit, one step.completed", b)
			}
		})
	}
}

// TestWorkerRefusalSaysWhy: a worker whose report the engine refuses reads
// the engine's reason in the 400's message and fields, on every call that
// carries events, and nothing is stored.
func TestWorkerRefusalSaysWhy(t *testing.T) {
	api, e, st := newAwaitAPI(t, "bolt")
	s, err := e.Start(t.Context(), "approve", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	rec := api.do(t, post("/api/_workers/claim", `{"queues":["q1"]}`))
	wantStatus(t, rec, http.StatusOK)
	j := decode[struct{ Jobs []store.Job }](t, rec).Jobs[0]
	const reason = `"step.completed" is not a progress event: complete or fail the job instead`
	for _, call := range []string{"events", "complete", "fail"} {
		body := fmt.Sprintf(`{"lease":%q,"error":"boom","events":[{"kind":"log"},{"kind":"step.completed"}]}`, j.Lease)
		if call != "fail" {
			body = strings.Replace(body, `"error":"boom",`, "", 1)
		}
		got := api.do(t, post("/api/_workers/jobs/q1/"+j.ID+"/"+call, body))
		wantStatus(t, got, http.StatusBadRequest)
		e := decode[errorBody](t, got).Error
		if e.Code != "validation_failed" || !strings.Contains(e.Message, reason) || e.Fields["events[1].kind"] != reason {
			t.Errorf("%s: answered %s; want validation_failed with the engine's reason in message and fields", call, got.Body)
		}
	}
	evs, err := st.Range(t.Context(), store.Context{Type: "flow", ID: s.FlowID}, store.RangeQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Kind == "log" || ev.Kind == "step.completed" || ev.Kind == "step.failed" {
			t.Errorf("a refused call stored %s", ev.Kind)
		}
	}
}

// TestWorkerEventTooLarge: one reported event over the event limit is a 413
// naming it, and nothing is stored.
func TestWorkerEventTooLarge(t *testing.T) {
	api, e, _ := newAwaitAPI(t, "bolt")
	if _, err := e.Start(t.Context(), "approve", nil, ""); err != nil {
		t.Fatal(err)
	}
	rec := api.do(t, post("/api/_workers/claim", `{"queues":["q1"]}`))
	wantStatus(t, rec, http.StatusOK)
	j := decode[struct{ Jobs []store.Job }](t, rec).Jobs[0]
	big := strings.Repeat("x", 300<<10)
	for _, call := range []string{"events", "complete"} {
		body := fmt.Sprintf(`{"lease":%q,"events":[{"kind":"log"},{"kind":"log","data":{"msg":%q}}]}`, j.Lease, big)
		got := api.do(t, post("/api/_workers/jobs/q1/"+j.ID+"/"+call, body))
		wantStatus(t, got, http.StatusRequestEntityTooLarge)
		if msg := decode[errorBody](t, got).Error.Message; !strings.Contains(msg, "events[1]") {
			t.Errorf("%s: 413 names no events[1]: %s", call, got.Body)
		}
	}
}

// TestWorkerResultTooLarge: a step's result is an event like the others, so
// one over the event limit is a 413 and the job stays held.
func TestWorkerResultTooLarge(t *testing.T) {
	api, e, _ := newAwaitAPI(t, "bolt")
	if _, err := e.Start(t.Context(), "approve", nil, ""); err != nil {
		t.Fatal(err)
	}
	rec := api.do(t, post("/api/_workers/claim", `{"queues":["q1"]}`))
	wantStatus(t, rec, http.StatusOK)
	j := decode[struct{ Jobs []store.Job }](t, rec).Jobs[0]
	big := strings.Repeat("x", 300<<10)
	base := "/api/_workers/jobs/q1/" + j.ID
	got := api.do(t, post(base+"/complete", fmt.Sprintf(`{"lease":%q,"result":{"blob":%q}}`, j.Lease, big)))
	wantStatus(t, got, http.StatusRequestEntityTooLarge)
	wantStatus(t, api.do(t, post(base+"/heartbeat", fmt.Sprintf(`{"lease":%q}`, j.Lease))), http.StatusOK)
}

// TestWorkerJobIDEscaped: a job id whose colon arrives escaped names the
// same job.
func TestWorkerJobIDEscaped(t *testing.T) {
	api, e, _ := newAwaitAPI(t, "bolt")
	if _, err := e.Start(t.Context(), "approve", nil, ""); err != nil {
		t.Fatal(err)
	}
	rec := api.do(t, post("/api/_workers/claim", `{"queues":["q1"]}`))
	wantStatus(t, rec, http.StatusOK)
	j := decode[struct{ Jobs []store.Job }](t, rec).Jobs[0]
	escaped := strings.Replace(j.ID, ":", "%3A", 1)
	got := api.do(t, post("/api/_workers/jobs/q1/"+escaped+"/heartbeat", fmt.Sprintf(`{"lease":%q}`, j.Lease)))
	wantStatus(t, got, http.StatusOK)
}

// TestWorkerCompleteClaimsNext: a completion that asks for a claim answers
// the next jobs under a lease of their own once the job is completed; one
// that does not answers as before; a wrong claim is refused before anything
// is stored.
func TestWorkerCompleteClaimsNext(t *testing.T) {
	for _, backend := range []string{"bolt", "redis"} {
		t.Run(backend, func(t *testing.T) {
			api, e, _ := newAwaitAPI(t, backend)
			first, err := e.Start(t.Context(), "approve", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			rec := api.do(t, post("/api/_workers/claim", `{"queues":["q1"],"max":1}`))
			wantStatus(t, rec, http.StatusOK)
			j := decode[struct{ Jobs []store.Job }](t, rec).Jobs[0]
			second, err := e.Start(t.Context(), "approve", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			base := "/api/_workers/jobs/q1/" + j.ID

			bad := api.do(t, post(base+"/complete", fmt.Sprintf(`{"lease":%q,"claim":{"queues":[]}}`, j.Lease)))
			wantStatus(t, bad, http.StatusBadRequest)
			if f := decode[errorBody](t, bad).Error.Fields; f["claim.queues"] == "" {
				t.Errorf("a wrong claim names no claim.queues: %s", bad.Body)
			}
			wantStatus(t, api.do(t, post(base+"/heartbeat", fmt.Sprintf(`{"lease":%q}`, j.Lease))), http.StatusOK)

			rec = api.do(t, post(base+"/complete", fmt.Sprintf(`{"lease":%q,"claim":{"queues":["q1"],"max":5}}`, j.Lease)))
			wantStatus(t, rec, http.StatusOK)
			got := decode[struct {
				Status string
				Jobs   []store.Job
			}](t, rec)
			var next *store.Job
			for i := range got.Jobs {
				if got.Jobs[i].RunID == second.FlowID {
					next = &got.Jobs[i]
				}
				if got.Jobs[i].RunID == first.FlowID && got.Jobs[i].Step == j.Step {
					t.Errorf("the completed job was handed out again: %+v", got.Jobs[i])
				}
			}
			if got.Status != "ok" || next == nil || next.Lease == "" || next.Attempt != 1 {
				t.Fatalf("complete with a claim answered %s; want ok and the second run's job under a lease", rec.Body)
			}
			// The claimed job is held: it completes under its lease, and the
			// plain completion answers as it always did.
			rec = api.do(t, post("/api/_workers/jobs/q1/"+next.ID+"/complete", fmt.Sprintf(`{"lease":%q}`, next.Lease)))
			wantStatus(t, rec, http.StatusOK)
			if strings.TrimSpace(rec.Body.String()) != `{"status":"ok"}` {
				t.Errorf("complete without a claim answered %s", rec.Body)
			}
		})
	}
}

// TestCompletionClaimWaits: a completion whose claim waits is answered with
// a run's job started meanwhile on the instance, handed to it in the
// start's own commit; with nothing started it answers no jobs once waitMs
// has passed, and a wait past a second is refused.
func TestCompletionClaimWaits(t *testing.T) {
	for _, backend := range []string{"bolt", "redis"} {
		t.Run(backend, func(t *testing.T) {
			ctx := t.Context()
			log := testkit.Logger(t)
			st := newEngineStore(t, backend, nil)
			// A poll interval past the test: only a hand-over answers the
			// waiting claim with a job.
			e := engine.New(st, engine.Options{PollInterval: time.Hour, Logger: log})
			if err := e.PutDefinition(ctx, &flows.Definition{Name: "one", Entry: "start", Steps: map[string]flows.Step{
				"start": {Queue: "q1"},
			}}); err != nil {
				t.Fatal(err)
			}
			api := &testAPI{h: handlers.New(handlers.Deps{Store: st, Engine: e, Log: log}).Routes(), store: st}
			claimOne := func() store.Job {
				t.Helper()
				if _, err := e.Start(ctx, "one", nil, ""); err != nil {
					t.Fatal(err)
				}
				rec := api.do(t, post("/api/_workers/claim", `{"queues":["q1"]}`))
				wantStatus(t, rec, http.StatusOK)
				return decode[struct{ Jobs []store.Job }](t, rec).Jobs[0]
			}
			complete := func(j store.Job, waitMs int) *httptest.ResponseRecorder {
				return api.do(t, post("/api/_workers/jobs/q1/"+j.ID+"/complete",
					fmt.Sprintf(`{"lease":%q,"claim":{"queues":["q1"],"waitMs":%d}}`, j.Lease, waitMs)))
			}

			j := claimOne()
			answered := make(chan *httptest.ResponseRecorder, 1)
			go func() { answered <- complete(j, 1000) }()
			wait.For(t, 5*time.Second, time.Millisecond, "the completion's claim to wait", func() bool { return e.Waiting() > 0 })
			next, err := e.Start(ctx, "one", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			rec := <-answered
			wantStatus(t, rec, http.StatusOK)
			got := decode[struct{ Jobs []store.Job }](t, rec).Jobs
			if len(got) != 1 || got[0].RunID != next.FlowID || got[0].Lease == "" {
				t.Fatalf("the waiting completion answered %s; want the run started meanwhile", rec.Body)
			}
			held, err := st.Job(ctx, store.JobRef{Queue: "q1", ID: got[0].ID})
			if err != nil || held.Lease != got[0].Lease {
				t.Fatalf("stored job = %+v, %v; want it held under the answered lease", held, err)
			}

			rec = complete(got[0], 20)
			wantStatus(t, rec, http.StatusOK)
			if body := strings.TrimSpace(rec.Body.String()); body != `{"status":"ok","jobs":[]}` {
				t.Errorf("a completion whose claim found nothing answered %s", body)
			}

			j = claimOne()
			bad := complete(j, 1001)
			wantStatus(t, bad, http.StatusBadRequest)
			if f := decode[errorBody](t, bad).Error.Fields; f["claim.waitMs"] == "" {
				t.Errorf("a claim waiting too long names no claim.waitMs: %s", bad.Body)
			}
		})
	}
}
