package engine_test

import (
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
)

// triggerOf is the trigger id the run's step.await.trigger handed out.
func triggerOf(t *testing.T, st engine.Store, run string) string {
	t.Helper()
	evs, err := testkit.RangeKinds(t.Context(), st, store.Context{Type: "flow", ID: run}, "step.await.trigger")
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 {
		t.Fatalf("run %s registered no trigger", run)
	}
	var d struct {
		TriggerID string `json:"triggerId"`
	}
	if err := json.Unmarshal(evs[len(evs)-1].Data, &d); err != nil || d.TriggerID == "" {
		t.Fatalf("step.await.trigger data %s: %v", evs[len(evs)-1].Data, err)
	}
	return d.TriggerID
}

func countKind(t *testing.T, st engine.Store, c store.Context, kind string) int {
	t.Helper()
	evs, err := testkit.RangeKinds(t.Context(), st, c, kind)
	if err != nil {
		t.Fatal(err)
	}
	return len(evs)
}

// awaitFlow is a flow whose second step awaits as a says.
func awaitFlow(t *testing.T, e *engine.Engine, name string, a *flows.Await) {
	t.Helper()
	d := &flows.Definition{Name: name, Entry: "start", Steps: map[string]flows.Step{
		"start":    {Queue: "default", Emits: []string{"started"}},
		"wait":     {Queue: "default", Subscribes: []string{"started"}, Await: a},
		"fallback": {Queue: "default"},
	}}
	if a.OnTimeout == "" {
		delete(d.Steps, "fallback")
	}
	if err := e.PutDefinition(t.Context(), d); err != nil {
		t.Fatal(err)
	}
}

// startAwaiting starts a run of flow and runs its entry step, so that its
// second step is awaiting.
func startAwaiting(t *testing.T, e *engine.Engine, c *testkit.Clock, flow string) string {
	t.Helper()
	s, err := e.Start(t.Context(), flow, json.RawMessage(`{"orderId":"o-1"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	runEntry(t, e)
	return s.FlowID
}

// runEntry claims the one queued job and completes it after emitting
// "started", without moving the clock.
func runEntry(t *testing.T, e *engine.Engine) {
	t.Helper()
	jobs, err := e.Claim(t.Context(), []string{"default"}, 1, 0)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v %v", jobs, err)
	}
	ack := store.JobAck{Queue: jobs[0].Queue, ID: jobs[0].ID, Lease: jobs[0].Lease}
	if _, err := e.Report(t.Context(), ack, emitEvents("started"), ""); err != nil {
		t.Fatal(err)
	}
	if err := e.Complete(t.Context(), ack, nil); err != nil {
		t.Fatal(err)
	}
}

func TestTriggerFiresOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := newEngine(t, st, c)
		awaitFlow(t, e, "approve", &flows.Await{Type: "trigger", Timeout: 60_000})
		run := startAwaiting(t, e, c, "approve")
		id := triggerOf(t, st, run)
		if n := countKind(t, st, store.Context{Type: "trigger", ID: id}, "trigger.registered"); n != 1 {
			t.Fatalf("trigger.registered = %d, want 1", n)
		}

		const n = 100
		outs := make([]engine.TriggerOutcome, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				outs[i], errs[i] = e.FireTrigger(t.Context(), id, json.RawMessage(`{"ok":true}`), engine.TriggerSource{Addr: "192.0.2.1"})
			})
		}
		wg.Wait()
		first := -1
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("POST %d: %v", i, errs[i])
			}
			if !outs[i].Replayed {
				if first >= 0 {
					t.Fatalf("POSTs %d and %d both fired", first, i)
				}
				first = i
			}
		}
		if first < 0 {
			t.Fatal("no POST fired")
		}
		for i := range n {
			o := outs[i]
			o.Replayed = false
			if o != outs[first] {
				t.Errorf("POST %d answered %+v, want %+v", i, outs[i], outs[first])
			}
		}
		if got := countKind(t, st, store.Context{Type: "flow", ID: run}, "step.resumed"); got != 1 {
			t.Errorf("step.resumed = %d, want 1", got)
		}
		if got := countKind(t, st, store.Context{Type: "trigger", ID: id}, "trigger.fired"); got != 1 {
			t.Errorf("trigger.fired = %d, want 1", got)
		}
		var resumed map[string]json.RawMessage
		runs := work(t, e, c, map[string]handler{"wait": func(j store.Job) ([]string, string, bool) {
			_ = json.Unmarshal(j.Input, &resumed)
			return nil, "", true
		}})
		if runs["wait"] != 1 {
			t.Errorf("wait ran %d times, want 1", runs["wait"])
		}
		if string(resumed["_resume"]) == "" || !json.Valid(resumed["_resume"]) {
			t.Errorf("resumed input = %v, want a _resume", resumed)
		}
		var res struct {
			Payload struct{ OK bool } `json:"payload"`
		}
		if err := json.Unmarshal(resumed["_resume"], &res); err != nil || !res.Payload.OK {
			t.Errorf("_resume = %s, want the payload", resumed["_resume"])
		}
		if m, _ := st.RunMeta(t.Context(), "approve", run); m.Status != store.RunCompleted {
			t.Errorf("status = %s, want completed", m.Status)
		}
	})
}

func TestTriggerRefusals(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := newEngine(t, st, c)
		awaitFlow(t, e, "approve", &flows.Await{Type: "trigger", Timeout: 60_000})
		run := startAwaiting(t, e, c, "approve")
		id := triggerOf(t, st, run)

		tampered := []byte(id)
		if tampered[len(tampered)-1] == 'A' {
			tampered[len(tampered)-1] = 'B'
		} else {
			tampered[len(tampered)-1] = 'A'
		}
		if _, err := e.FireTrigger(t.Context(), string(tampered), nil, engine.TriggerSource{}); !errors.Is(err, engine.ErrTriggerInvalid) {
			t.Errorf("tampered: err = %v, want ErrTriggerInvalid", err)
		}
		if _, err := e.FireTrigger(t.Context(), "no-such-trigger", nil, engine.TriggerSource{}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unknown: err = %v, want ErrNotFound", err)
		}
		other, _ := auth.NewTriggerSigner(auth.RandomKey())
		forged := other.Issue("x", c.Now().Add(time.Hour))
		if _, err := e.FireTrigger(t.Context(), forged, nil, engine.TriggerSource{}); !errors.Is(err, engine.ErrTriggerInvalid) {
			t.Errorf("signed by another key: err = %v, want ErrTriggerInvalid", err)
		}

		c.Add(time.Minute)
		if _, err := e.FireTrigger(t.Context(), id, nil, engine.TriggerSource{}); !errors.Is(err, engine.ErrTriggerGone) {
			t.Errorf("expired: err = %v, want ErrTriggerGone", err)
		}
		if err := e.Tick(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := countKind(t, st, store.Context{Type: "trigger", ID: id}, "trigger.timeout"); got != 1 {
			t.Errorf("trigger.timeout = %d, want 1", got)
		}
		m, _ := st.RunMeta(t.Context(), "approve", run)
		if m.Status != store.RunFailed {
			t.Errorf("after the timeout status = %s, want failed", m.Status)
		}
		want := []string{"step.await.timeout wait", "flow.failed"}
		if got := kinds(t, st, run); !slices.Equal(got[len(got)-2:], want) {
			t.Errorf("events end %v, want %v", got, want)
		}
	})
}

func TestTriggerCancelledWithRun(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := newEngine(t, st, c)
		awaitFlow(t, e, "approve", &flows.Await{Type: "trigger"})
		run := startAwaiting(t, e, c, "approve")
		id := triggerOf(t, st, run)
		if _, err := e.Cancel(t.Context(), "approve", run, "no longer needed"); err != nil {
			t.Fatal(err)
		}
		if got := countKind(t, st, store.Context{Type: "trigger", ID: id}, "trigger.cancelled"); got != 1 {
			t.Errorf("trigger.cancelled = %d, want 1", got)
		}
		if _, err := e.FireTrigger(t.Context(), id, nil, engine.TriggerSource{}); !errors.Is(err, engine.ErrTriggerGone) {
			t.Errorf("after cancel: err = %v, want ErrTriggerGone", err)
		}
	})
}

func TestTriggerSchema(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := newEngine(t, st, c)
		schema := json.RawMessage(`{"type":"object","required":["approved"],"properties":{"approved":{"type":"boolean"}}}`)
		awaitFlow(t, e, "approve", &flows.Await{Type: "trigger", Schema: schema})
		id := triggerOf(t, st, startAwaiting(t, e, c, "approve"))
		if _, err := e.FireTrigger(t.Context(), id, json.RawMessage(`{"approved":"yes"}`), engine.TriggerSource{}); !errors.Is(err, engine.ErrPayloadInvalid) {
			t.Errorf("bad payload: err = %v, want ErrPayloadInvalid", err)
		}
		if _, err := e.FireTrigger(t.Context(), id, json.RawMessage(`{"approved":true}`), engine.TriggerSource{}); err != nil {
			t.Errorf("good payload after a bad one: %v", err)
		}
	})
}

func TestTimeAwait(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e1, e2 := newEngine(t, st, c), newEngine(t, st, c)
		awaitFlow(t, e1, "later", &flows.Await{Type: "time", Delay: 30_000})
		s, err := e1.Start(t.Context(), "later", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		run := s.FlowID
		runEntry(t, e1)
		c.Add(29 * time.Second)
		tickBoth(t, e1, e2)
		if got := countKind(t, st, store.Context{Type: "flow", ID: run}, "step.resumed"); got != 0 {
			t.Fatalf("resumed %d times before it was due", got)
		}
		// A restart: a new engine on the same store finds the timer.
		e3 := newEngine(t, st, c)
		c.Add(time.Second)
		tickBoth(t, e1, e2, e3)
		tickBoth(t, e1, e2, e3)
		if got := countKind(t, st, store.Context{Type: "flow", ID: run}, "step.resumed"); got != 1 {
			t.Fatalf("step.resumed = %d, want 1", got)
		}
		if runs := work(t, e2, c, nil); runs["wait"] != 1 {
			t.Errorf("wait ran %d times, want 1", runs["wait"])
		}
		if m, _ := st.RunMeta(t.Context(), "later", run); m.Status != store.RunCompleted {
			t.Errorf("status = %s, want completed", m.Status)
		}
	})
}

// tickBoth ticks every engine at once, so that they race for the timers.
func tickBoth(t *testing.T, es ...*engine.Engine) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(es))
	for i, e := range es {
		wg.Go(func() { errs[i] = e.Tick(t.Context()) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestAwaitTimeoutRunsOnTimeout(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := newEngine(t, st, c)
		awaitFlow(t, e, "approve", &flows.Await{Type: "trigger", Timeout: 5_000, OnTimeout: "fallback"})
		run := startAwaiting(t, e, c, "approve")
		c.Add(5 * time.Second)
		if err := e.Tick(t.Context()); err != nil {
			t.Fatal(err)
		}
		runs := work(t, e, c, nil)
		if runs["fallback"] != 1 || runs["wait"] != 0 {
			t.Errorf("runs = %v, want fallback once and wait never", runs)
		}
		m, _ := st.RunMeta(t.Context(), "approve", run)
		if m.Status != store.RunCompleted {
			t.Errorf("status = %s, want completed", m.Status)
		}
		if got := countKind(t, st, store.Context{Type: "flow", ID: run}, "step.await.timeout"); got != 1 {
			t.Errorf("step.await.timeout = %d, want 1", got)
		}
	})
}

func emitEvents(names ...string) []event.Event {
	var out []event.Event
	for _, n := range names {
		out = append(out, event.Event{Kind: "emit", Data: json.RawMessage(`{"event":"` + n + `","payload":{}}`)})
	}
	return out
}
