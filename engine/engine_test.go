package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
)

// forEachBackend runs f on a fresh store of each backend every engine
// scenario runs on: the embedded store and Redis.
func forEachBackend(t *testing.T, f func(t *testing.T, st engine.Store)) {
	backendtest.Each(t, []string{backendtest.Embedded, backendtest.Redis}, func(t *testing.T, b backendtest.Backend) { f(t, b.Open(t)) })
}

func newEngine(t *testing.T, st engine.Store, c *testkit.Clock) *engine.Engine {
	return engine.New(st, engine.Options{Now: c.Now, Lease: 10 * time.Second, Logger: testkit.Logger(t)})
}

func mustDefine(t testing.TB, e *engine.Engine, name, file string) {
	t.Helper()
	defs, err := flows.LoadDir("../flows/testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		if d.Name == file {
			d.Name = name
			if err := e.PutDefinition(t.Context(), d); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no flow %s in testdata", file)
}

// handler runs one job and says how it ended.
type handler func(j store.Job) (emits []string, failMsg string, retriable bool)

// work claims and runs jobs until none is left, returning how often each
// step ran.
func work(t *testing.T, e *engine.Engine, c *testkit.Clock, handlers map[string]handler) map[string]int {
	t.Helper()
	ctx := t.Context()
	runs := map[string]int{}
	for range 1000 {
		jobs, err := e.Claim(ctx, []string{"default"}, 10, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 0 {
			// Let due retries fire, then look again.
			c.Add(time.Minute)
			if err := e.Tick(ctx); err != nil {
				t.Fatal(err)
			}
			if jobs, err = e.Claim(ctx, []string{"default"}, 10, 0); err != nil {
				t.Fatal(err)
			}
			if len(jobs) == 0 {
				return runs
			}
		}
		for _, j := range jobs {
			runs[j.Step]++
			ack := store.JobAck{Queue: j.Queue, ID: j.ID, Lease: j.Lease}
			if _, err := e.Report(ctx, ack, []event.Event{{Kind: "step.started"}}, ""); err != nil {
				t.Fatalf("report %s: %v", j.ID, err)
			}
			var emits []string
			var failMsg string
			retriable := true
			if h := handlers[j.Step]; h != nil {
				emits, failMsg, retriable = h(j)
			} else {
				emits = defaultEmits[j.Step]
			}
			for _, name := range emits {
				ev := event.Event{Kind: "emit", Data: json.RawMessage(fmt.Sprintf(`{"event":%q,"payload":{"from":%q}}`, name, j.Step))}
				if _, err := e.Report(ctx, ack, []event.Event{ev}, ""); err != nil {
					t.Fatalf("emit %s: %v", name, err)
				}
			}
			if failMsg != "" {
				if err := e.Fail(ctx, ack, failMsg, &retriable); err != nil {
					t.Fatalf("fail %s: %v", j.ID, err)
				}
				continue
			}
			if err := e.Complete(ctx, ack, json.RawMessage(`{"ok":true}`)); err != nil && !errors.Is(err, engine.ErrRunEnded) {
				t.Fatalf("complete %s: %v", j.ID, err)
			}
		}
	}
	t.Fatal("work did not finish")
	return nil
}

var defaultEmits = map[string][]string{
	"fetch_data":   {"fetch_data.completed"},
	"process_data": {"process_data.completed"},
	"start":        {"step.a.trigger", "step.b.trigger"},
	"parallelA":    {"step.a.done"},
	"parallelB":    {"step.b.done"},
}

func kinds(t *testing.T, st engine.Store, run string) []string {
	t.Helper()
	evs, err := st.Range(t.Context(), store.Context{Type: "flow", ID: run}, store.RangeQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		k := ev.Kind
		if ev.Step != "" {
			k += " " + ev.Step
		}
		if ev.Kind == "step.failed" {
			var d struct{ WillRetry bool }
			_ = json.Unmarshal(ev.Data, &d)
			k += fmt.Sprintf(" willRetry=%v", d.WillRetry)
		}
		out = append(out, k)
	}
	return out
}

func TestExampleFlowRetries(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := newEngine(t, st, c)
		mustDefine(t, e, "example-flow", "example-flow")
		started, err := e.Start(t.Context(), "example-flow", json.RawMessage(`{"url":"x"}`), "")
		if err != nil {
			t.Fatal(err)
		}
		if started.Step != "fetch_data" || started.Queue != "default" || started.ID != started.FlowID+":fetch_data" {
			t.Errorf("Start = %+v", started)
		}
		failed := false
		runs := work(t, e, c, map[string]handler{"fetch_data": func(j store.Job) ([]string, string, bool) {
			if !failed {
				failed = true
				return nil, "Network timeout", true
			}
			if j.Attempt != 2 {
				t.Errorf("retry attempt = %d, want 2", j.Attempt)
			}
			return []string{"fetch_data.completed"}, "", true
		}})
		if m, err := st.RunMeta(t.Context(), "example-flow", started.FlowID); err != nil || m.Status != store.RunAwaiting {
			t.Fatalf("before the approval: run meta = %+v, %v; want awaiting", m, err)
		}
		if _, err := e.FireTrigger(t.Context(), triggerOf(t, st, started.FlowID), json.RawMessage(`{"approved":true}`), engine.TriggerSource{}); err != nil {
			t.Fatal(err)
		}
		for k, v := range work(t, e, c, nil) {
			runs[k] += v
		}
		want := []string{
			"flow.started",
			"step.started fetch_data", "step.failed fetch_data willRetry=true",
			"step.retry fetch_data", "step.started fetch_data", "emit fetch_data", "step.completed fetch_data",
			"step.started process_data", "emit process_data", "step.await.trigger await_approval", "step.completed process_data",
			"step.resumed await_approval", "step.started await_approval", "step.completed await_approval",
			"flow.completed",
		}
		if diff := cmp.Diff(want, kinds(t, st, started.FlowID)); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		if runs["fetch_data"] != 2 || runs["process_data"] != 1 {
			t.Errorf("runs = %v", runs)
		}
		m, err := st.RunMeta(t.Context(), "example-flow", started.FlowID)
		if err != nil {
			t.Fatal(err)
		}
		if m.Status != store.RunCompleted || m.CompletedSteps != 3 || m.StepCount != 3 || m.CompletedAt == 0 {
			t.Errorf("run meta = %+v", m)
		}
	})
}

func TestDiamondFanIn(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := newEngine(t, st, c)
		mustDefine(t, e, "diamond", "diamond")
		started, err := e.Start(t.Context(), "diamond", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		var finalInput json.RawMessage
		runs := work(t, e, c, map[string]handler{
			// parallelA's emit is delivered twice.
			"parallelA": func(store.Job) ([]string, string, bool) { return []string{"step.a.done", "step.a.done"}, "", true },
			"final": func(j store.Job) ([]string, string, bool) {
				finalInput = j.Input
				return nil, "", true
			},
		})
		if diff := cmp.Diff(map[string]int{"start": 1, "parallelA": 1, "parallelB": 1, "final": 1}, runs); diff != "" {
			t.Errorf("step runs (-want +got):\n%s", diff)
		}
		var in map[string]map[string]string
		if err := json.Unmarshal(finalInput, &in); err != nil || in["step.a.done"]["from"] != "parallelA" || in["step.b.done"]["from"] != "parallelB" {
			t.Errorf("final input = %s", finalInput)
		}
		got := kinds(t, st, started.FlowID)
		if n := count(got, "flow.completed"); n != 1 {
			t.Errorf("%d flow.completed in %v", n, got)
		}
		if n := count(got, "emit parallelA"); n != 1 {
			t.Errorf("redelivered emit stored %d times", n)
		}
	})
}

func count(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

func TestNonRetriableFailureFailsRun(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := newEngine(t, st, c)
		mustDefine(t, e, "example-flow", "example-flow")
		started, err := e.Start(t.Context(), "example-flow", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		work(t, e, c, map[string]handler{"fetch_data": func(store.Job) ([]string, string, bool) { return nil, "bad input", false }})
		want := []string{"flow.started", "step.started fetch_data", "step.failed fetch_data willRetry=false", "flow.failed"}
		if diff := cmp.Diff(want, kinds(t, st, started.FlowID)); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		page, err := e.Runs(t.Context(), "example-flow", store.RunFailed, 0, 10)
		if err != nil || page.Total != 1 {
			t.Errorf("failed runs = %+v, %v", page, err)
		}
	})
}

func TestCancelStopsDispatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		ctx := t.Context()
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := newEngine(t, st, c)
		mustDefine(t, e, "diamond", "diamond")
		started, err := e.Start(ctx, "diamond", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		jobs, err := e.Claim(ctx, []string{"default"}, 1, 0)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim = %v, %v", jobs, err)
		}
		ack := store.JobAck{Queue: "default", ID: jobs[0].ID, Lease: jobs[0].Lease}
		if _, err := e.Report(ctx, ack, []event.Event{{Kind: "emit", Data: json.RawMessage(`{"event":"step.a.trigger"}`)}}, ""); err != nil {
			t.Fatal(err)
		}
		prev, err := e.Cancel(ctx, "diamond", started.FlowID, "user")
		if err != nil || prev != store.RunRunning {
			t.Fatalf("Cancel = %q, %v", prev, err)
		}
		beat, err := e.Heartbeat(ctx, ack)
		if err != nil || !beat.Canceled {
			t.Errorf("heartbeat after cancel = %+v, %v; want canceled", beat, err)
		}
		if err := e.Complete(ctx, ack, nil); !errors.Is(err, engine.ErrLeaseLost) {
			t.Errorf("complete after cancel: %v", err)
		}
		c.Add(time.Hour)
		if jobs, _ := e.Claim(ctx, []string{"default"}, 10, 0); len(jobs) != 0 {
			t.Errorf("claimed %+v after cancel", jobs)
		}
		got := kinds(t, st, started.FlowID)
		if got[len(got)-1] != "flow.cancelled" || count(got, "flow.cancelled") != 1 {
			t.Errorf("events = %v", got)
		}
		page, _ := e.Runs(ctx, "diamond", store.RunCancelled, 0, 10)
		if page.Total != 1 {
			t.Errorf("canceled index total = %d", page.Total)
		}
	})
}

func TestLeaseExpiryRedelivers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		ctx := t.Context()
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := newEngine(t, st, c)
		mustDefine(t, e, "example-flow", "example-flow")
		if _, err := e.Start(ctx, "example-flow", nil, ""); err != nil {
			t.Fatal(err)
		}
		first, err := e.Claim(ctx, []string{"default"}, 1, 0)
		if err != nil || len(first) != 1 {
			t.Fatal(first, err)
		}
		c.Add(11 * time.Second) // the worker died: its lease runs out
		again, err := e.Claim(ctx, []string{"default"}, 1, 0)
		if err != nil || len(again) != 1 || again[0].Attempt != 2 {
			t.Fatalf("redelivery = %+v, %v", again, err)
		}
		old := store.JobAck{Queue: "default", ID: first[0].ID, Lease: first[0].Lease}
		if err := e.Complete(ctx, old, nil); !errors.Is(err, engine.ErrLeaseLost) {
			t.Errorf("complete by the old holder: %v, want ErrLeaseLost", err)
		}
		if _, err := e.Heartbeat(ctx, old); !errors.Is(err, engine.ErrLeaseLost) {
			t.Errorf("heartbeat by the old holder: %v, want ErrLeaseLost", err)
		}
	})
}

// slowClaims is a store whose claims are answered late: the clock moves on
// by delay while each runs, as when a failover made the store send a claim
// again.
type slowClaims struct {
	engine.Store
	clock *testkit.Clock
	delay time.Duration
}

func (s slowClaims) Claim(ctx context.Context, queues []string, now, leaseUntil int64, lease string, max int) ([]store.Job, error) {
	jobs, err := s.Store.Claim(ctx, queues, now, leaseUntil, lease, max)
	s.clock.Add(s.delay)
	return jobs, err
}

// TestLateClaimRenewsLease: a job whose claim was answered with less than
// half of its lease left is handed out with a whole lease.
func TestLateClaimRenewsLease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		ctx := t.Context()
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := newEngine(t, slowClaims{Store: st, clock: c, delay: 8 * time.Second}, c)
		mustDefine(t, e, "example-flow", "example-flow")
		if _, err := e.Start(ctx, "example-flow", nil, ""); err != nil {
			t.Fatal(err)
		}
		jobs, err := e.Claim(ctx, []string{"default"}, 1, 0)
		if err != nil || len(jobs) != 1 {
			t.Fatal(jobs, err)
		}
		want := c.Now().Add(10 * time.Second).UnixMilli()
		if jobs[0].LeaseUntil != want {
			t.Errorf("handed out with its lease until %d, want %d (a whole lease from now)", jobs[0].LeaseUntil, want)
		}
		stored, err := st.Job(ctx, store.JobRef{Queue: "default", ID: jobs[0].ID})
		if err != nil || stored.LeaseUntil != want || stored.Lease != jobs[0].Lease {
			t.Errorf("stored job = %+v, %v; want it held by the same lease until %d", stored, err, want)
		}
	})
}

func TestIdempotentStart(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := newEngine(t, st, c)
		mustDefine(t, e, "diamond", "diamond")
		a, err := e.Start(t.Context(), "diamond", nil, "k1")
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.Start(t.Context(), "diamond", nil, "k1")
		if err != nil || b.FlowID != a.FlowID || !b.Replayed {
			t.Errorf("repeat = %+v, %v; want run %s replayed", b, err, a.FlowID)
		}
		if _, err := e.Start(t.Context(), "nope", nil, ""); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unknown flow: %v", err)
		}
	})
}

// TestTwoEnginesRace runs diamonds with two engines on one store, their
// workers interleaved: every step runs once and every run ends once.
func TestTwoEnginesRace(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e1, e2 := newEngine(t, st, c), newEngine(t, st, c)
		mustDefine(t, e1, "diamond", "diamond")
		const n = 40
		var ids []string
		for i := range n {
			s, err := []*engine.Engine{e1, e2}[i%2].Start(ctx, "diamond", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, s.FlowID)
		}
		var mu sync.Mutex
		ran := map[string]int{}
		var wg sync.WaitGroup
		for w := range 6 {
			e := []*engine.Engine{e1, e2}[w%2]
			wg.Go(func() {
				for {
					jobs, err := e.Claim(ctx, []string{"default"}, 3, 0)
					if err != nil {
						t.Error(err)
						return
					}
					if len(jobs) == 0 {
						mu.Lock()
						done := len(ran) == 4*n
						mu.Unlock()
						if done {
							return
						}
						continue
					}
					for _, j := range jobs {
						mu.Lock()
						ran[j.ID]++
						mu.Unlock()
						ack := store.JobAck{Queue: j.Queue, ID: j.ID, Lease: j.Lease}
						for _, name := range defaultEmits[j.Step] {
							ev := event.Event{Kind: "emit", Data: json.RawMessage(fmt.Sprintf(`{"event":%q}`, name))}
							if _, err := e.Report(ctx, ack, []event.Event{ev}, ""); err != nil {
								t.Error(err)
							}
						}
						if err := e.Complete(ctx, ack, nil); err != nil {
							t.Error(err)
						}
					}
				}
			})
		}
		wg.Wait()
		for id, k := range ran {
			if k != 1 {
				t.Errorf("job %s ran %d times", id, k)
			}
		}
		for _, id := range ids {
			got := kinds(t, st, id)
			if count(got, "flow.completed") != 1 || count(got, "step.completed final") != 1 {
				t.Errorf("run %s: %v", id, got)
			}
		}
		page, err := e1.Runs(ctx, "diamond", store.RunCompleted, 0, 100)
		if err != nil || page.Total != n {
			t.Errorf("completed index total = %d, %v; want %d", page.Total, err, n)
		}
		if page, _ := e1.Runs(ctx, "diamond", store.RunRunning, 0, 100); page.Total != 0 {
			t.Errorf("%d runs still indexed as running", page.Total)
		}
	})
}
