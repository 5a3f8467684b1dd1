package handlers_test

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
)

// newAwaitAPI serves the API with a flow engine on each backend, on the
// fake clock, and a flow whose step "wait" awaits a trigger for a minute.
func newAwaitAPI(t *testing.T, backend string) (*testAPI, *engine.Engine, engine.Store) {
	t.Helper()
	clock := testkit.NewClock(epoch)
	log := testkit.Logger(t)
	st := newEngineStore(t, backend, clock.Now)
	e := engine.New(st, engine.Options{Now: clock.Now, Logger: log})
	d := &flows.Definition{Name: "approve", Entry: "start", Steps: map[string]flows.Step{
		"start": {Queue: "q1", Emits: []string{"started"}},
		"wait":  {Queue: "q1", Subscribes: []string{"started"}, Await: &flows.Await{Type: "trigger", Timeout: 60_000}},
	}}
	if err := e.PutDefinition(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	api := handlers.New(handlers.Deps{Store: st, Engine: e, Log: log, Now: clock.Now})
	return &testAPI{h: api.Routes(), store: st, clock: clock}, e, st
}

// awaitingRun starts a run and runs its entry step; it returns the run and
// the trigger its "wait" step awaits.
func awaitingRun(t *testing.T, e *engine.Engine, st engine.Store) (run, trigger string) {
	t.Helper()
	ctx := t.Context()
	s, err := e.Start(ctx, "approve", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := e.Claim(ctx, []string{"q1"}, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ack store.JobAck
	for _, j := range jobs {
		if j.RunID == s.FlowID && j.Step == "start" {
			ack = store.JobAck{Queue: "q1", ID: j.ID, Lease: j.Lease}
		}
	}
	if ack.ID == "" {
		t.Fatalf("claim: no start job of run %s in %v", s.FlowID, jobs)
	}
	if _, err := e.Report(ctx, ack, []event.Event{{Kind: "emit", Data: json.RawMessage(`{"event":"started","payload":{}}`)}}, ""); err != nil {
		t.Fatal(err)
	}
	if err := e.Complete(ctx, ack, nil); err != nil {
		t.Fatal(err)
	}
	evs, err := testkit.RangeKinds(ctx, st, store.Context{Type: "flow", ID: s.FlowID}, "step.await.trigger")
	if err != nil || len(evs) != 1 {
		t.Fatalf("step.await.trigger: %v %v", evs, err)
	}
	var d struct {
		TriggerID string `json:"triggerId"`
	}
	_ = json.Unmarshal(evs[0].Data, &d)
	return s.FlowID, d.TriggerID
}

func TestTriggerMatrix(t *testing.T) {
	for _, backend := range []string{"bolt", "redis"} {
		t.Run(backend, func(t *testing.T) {
			api, e, st := newAwaitAPI(t, backend)
			run, id := awaitingRun(t, e, st)

			waits := decode[struct {
				Count int
				Items []engine.Wait
			}](t, api.do(t, get("/api/_flows/waits?kind=trigger&flowName=approve")))
			if waits.Count != 1 || waits.Items[0].TriggerID != id || waits.Items[0].RunID != run {
				t.Fatalf("waits = %+v, want the one trigger", waits)
			}

			tampered := []byte(id)
			if tampered[len(tampered)-2] == 'A' {
				tampered[len(tampered)-2] = 'B'
			} else {
				tampered[len(tampered)-2] = 'A'
			}
			wantStatus(t, api.do(t, post("/api/_flows/triggers/"+string(tampered), `{}`)), http.StatusUnauthorized)
			wantStatus(t, api.do(t, post("/api/_flows/triggers/unknown-trigger", `{}`)), http.StatusNotFound)

			first := api.do(t, post("/api/_flows/triggers/"+id, `{"approved":true}`))
			wantStatus(t, first, http.StatusOK)
			again := api.do(t, post("/api/_flows/triggers/"+id, `{"approved":false}`))
			wantStatus(t, again, http.StatusOK)
			a, b := decode[engine.TriggerOutcome](t, first), decode[engine.TriggerOutcome](t, again)
			if a.Replayed || !b.Replayed || again.Header().Get("Idempotent-Replayed") != "true" {
				t.Errorf("replayed flags: first %v, second %v", a.Replayed, b.Replayed)
			}
			b.Replayed = false
			if a != b {
				t.Errorf("second POST answered %+v, want %+v", b, a)
			}
			evs, err := testkit.RangeKinds(t.Context(), st, store.Context{Type: "flow", ID: run}, "step.resumed")
			if err != nil || len(evs) != 1 {
				t.Errorf("step.resumed = %d, want 1 (%v)", len(evs), err)
			}
			fired, err := testkit.RangeKinds(t.Context(), st, store.Context{Type: "trigger", ID: id}, "trigger.fired")
			if err != nil || len(fired) != 1 {
				t.Fatalf("trigger.fired = %d, want 1 (%v)", len(fired), err)
			}
			var data struct {
				Payload struct{ Approved bool }
				Source  engine.TriggerSource
			}
			if err := json.Unmarshal(fired[0].Data, &data); err != nil || !data.Payload.Approved || data.Source.Addr == "" {
				t.Errorf("trigger.fired data = %s, want the first payload and its source", fired[0].Data)
			}
			waits = decode[struct {
				Count int
				Items []engine.Wait
			}](t, api.do(t, get("/api/_flows/waits")))
			if waits.Count != 0 {
				t.Errorf("waits after the fire = %+v, want none", waits)
			}

			// Expired: a second run's trigger a minute later.
			_, late := awaitingRun(t, e, st)
			api.clock.Set(api.clock.Now().Add(time.Minute))
			wantStatus(t, api.do(t, post("/api/_flows/triggers/"+late, `{}`)), http.StatusGone)
		})
	}
}

func TestTriggerConcurrentPOSTs(t *testing.T) {
	for _, backend := range []string{"bolt", "redis"} {
		t.Run(backend, func(t *testing.T) {
			api, e, st := newAwaitAPI(t, backend)
			run, id := awaitingRun(t, e, st)
			var wg sync.WaitGroup
			codes := make([]int, 100)
			for i := range codes {
				wg.Go(func() { codes[i] = api.do(t, post("/api/_flows/triggers/"+id, `{"n":1}`)).Code })
			}
			wg.Wait()
			for i, c := range codes {
				if c != http.StatusOK {
					t.Errorf("POST %d: %d", i, c)
				}
			}
			for ctx, kind := range map[store.Context]string{{Type: "flow", ID: run}: "step.resumed", {Type: "trigger", ID: id}: "trigger.fired"} {
				evs, err := testkit.RangeKinds(t.Context(), st, ctx, kind)
				if err != nil || len(evs) != 1 {
					t.Errorf("%s = %d, want 1 (%v)", kind, len(evs), err)
				}
			}
		})
	}
}
