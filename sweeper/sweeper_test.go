package sweeper_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/sweeper"
)

// backendStore is what both backends offer the sweeper.
type backendStore interface {
	engine.Store
	store.KV
}

// forEachBackend runs f on a fresh store of the embedded store and of
// Redis.
func forEachBackend(t *testing.T, f func(t *testing.T, st backendStore)) {
	backendtest.Each(t, []string{backendtest.Embedded, backendtest.Redis}, func(t *testing.T, b backendtest.Backend) { f(t, b.Open(t)) })
}

const stallAfter = 5 * time.Minute

// awaitFlow is a flow whose second step, run after the entry emits
// "started", awaits a trigger with timeout ms (0: none).
func awaitFlow(t *testing.T, e *engine.Engine, name string, timeout int64) {
	t.Helper()
	d := &flows.Definition{Name: name, Entry: "start", Steps: map[string]flows.Step{
		"start": {Queue: name, Emits: []string{"started"}},
		"wait":  {Queue: name, Subscribes: []string{"started"}, Await: &flows.Await{Type: "trigger", Timeout: timeout}},
	}}
	if err := e.PutDefinition(t.Context(), d); err != nil {
		t.Fatal(err)
	}
}

func start(t *testing.T, e *engine.Engine, flow string) string {
	t.Helper()
	s, err := e.Start(t.Context(), flow, json.RawMessage(`{}`), "")
	if err != nil {
		t.Fatal(err)
	}
	return s.FlowID
}

// claim takes the one job of queue; complete says whether the worker
// emits "started" and completes it, or dies holding it.
func claim(t *testing.T, e *engine.Engine, queue string, complete bool) {
	t.Helper()
	jobs, err := e.Claim(t.Context(), []string{queue}, 1, 0)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim %s: %v %v", queue, jobs, err)
	}
	if !complete {
		return
	}
	ack := store.JobAck{Queue: jobs[0].Queue, ID: jobs[0].ID, Lease: jobs[0].Lease}
	ev := event.Event{Kind: "emit", Data: json.RawMessage(`{"event":"started","payload":{}}`)}
	if _, err := e.Report(t.Context(), ack, []event.Event{ev}, ""); err != nil {
		t.Fatal(err)
	}
	if err := e.Complete(t.Context(), ack, nil); err != nil {
		t.Fatal(err)
	}
}

func countKind(t *testing.T, st store.Store, run, kind string) int {
	t.Helper()
	evs, err := testkit.RangeKinds(t.Context(), st, store.Context{Type: "flow", ID: run}, kind)
	if err != nil {
		t.Fatal(err)
	}
	return len(evs)
}

func streamLen(t *testing.T, st store.Store, run string) int {
	t.Helper()
	evs, err := st.Range(t.Context(), store.Context{Type: "flow", ID: run}, store.RangeQuery{})
	if err != nil {
		t.Fatal(err)
	}
	return len(evs)
}

// TestSweepOneFixturePerClass sweeps four runs, one of each class, and
// checks that each is handled as its class says, once.
func TestSweepOneFixturePerClass(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st backendStore) {
		c := testkit.NewClock(time.Now()) // idleness is measured from the store's wall-clock stamps
		e := engine.New(st, engine.Options{Now: c.Now, Lease: 10 * time.Second, Logger: testkit.Logger(t)})
		awaitFlow(t, e, "waiting", time.Hour.Milliseconds())
		awaitFlow(t, e, "overdue", 5_000)
		awaitFlow(t, e, "stuck", 0)
		awaitFlow(t, e, "orphaned", 0)

		waiting := start(t, e, "waiting")
		claim(t, e, "waiting", true)
		overdue := start(t, e, "overdue")
		claim(t, e, "overdue", true)
		stuck := start(t, e, "stuck")
		claim(t, e, "stuck", false) // its worker dies holding the job
		orphaned := start(t, e, "orphaned")
		end := event.Event{Kind: "flow.failed", Subject: orphaned, RunID: orphaned, FlowName: "orphaned", Data: json.RawMessage(`{"error":"x"}`)}
		if _, err := st.Append(t.Context(), store.Context{Type: "flow", ID: orphaned}, []event.Event{end}, store.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		waitingLen := streamLen(t, st, waiting)

		c.Add(2 * stallAfter)
		sw := sweeper.New(e, st, sweeper.Options{StallAfter: stallAfter, Now: c.Now, Holder: "a", Logger: testkit.Logger(t)})
		rep, err := sw.Sweep(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int{engine.SweepWaiting: 1, engine.SweepOverdue: 1, engine.SweepStuck: 1, engine.SweepOrphaned: 1}
		if !rep.Led || !equalCounts(rep.Classes, want) {
			t.Errorf("first sweep = %+v, want led and %v", rep, want)
		}

		if got := streamLen(t, st, waiting); got != waitingLen {
			t.Errorf("waiting run: %d events after the sweep, want %d (untouched)", got, waitingLen)
		}
		if got := countKind(t, st, overdue, "step.await.timeout"); got != 1 {
			t.Errorf("overdue run: step.await.timeout = %d, want 1", got)
		}
		for run, kind := range map[string]string{waiting: "flow.stalled", overdue: "flow.stalled", stuck: "flow.stalled", orphaned: "flow.index.repaired"} {
			want := 0
			if run == stuck || run == orphaned {
				want = 1
			}
			if got := countKind(t, st, run, kind); got != want {
				t.Errorf("run %s: %s = %d, want %d", run, kind, got, want)
			}
		}
		if m, _ := st.RunMeta(t.Context(), "orphaned", orphaned); m.Status != store.RunFailed {
			t.Errorf("orphaned run status = %s, want failed", m.Status)
		}
		if page, _ := st.ListRuns(t.Context(), "orphaned", store.RunFailed, 0, 10); len(page.Runs) != 1 {
			t.Errorf("failed index of the orphaned flow = %v, want the run", page.Runs)
		}

		// The engine's own timer comes late and finds nothing to time out;
		// a second sweep flags nothing twice.
		if err := e.Tick(t.Context()); err != nil {
			t.Fatal(err)
		}
		rep, err = sw.Sweep(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		want = map[string]int{engine.SweepWaiting: 1, engine.SweepFlagged: 1}
		if !equalCounts(rep.Classes, want) {
			t.Errorf("second sweep = %v, want %v", rep.Classes, want)
		}
		if got := countKind(t, st, overdue, "step.await.timeout"); got != 1 {
			t.Errorf("overdue run after the engine's tick: step.await.timeout = %d, want 1", got)
		}
		if got := countKind(t, st, stuck, "flow.stalled"); got != 1 {
			t.Errorf("stuck run after two sweeps: flow.stalled = %d, want 1", got)
		}

		s := sw.Stats()
		if s.Sweeps != 2 || s.Runs[engine.SweepStuck] != 1 || s.Runs[engine.SweepWaiting] != 2 || s.Errors != 0 {
			t.Errorf("stats = %+v", s)
		}
		reg := prometheus.NewPedanticRegistry()
		if err := reg.Register(sw.Collector()); err != nil {
			t.Fatal(err)
		}
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		series := map[string]int{}
		for _, f := range families {
			series[f.GetName()] = len(f.GetMetric())
		}
		if series["nqd_sweeper_runs_total"] != 5 || series["nqd_sweeper_sweeps_total"] != 1 {
			t.Errorf("series = %v, want 5 classes of nqd_sweeper_runs_total", series)
		}
	})
}

func equalCounts(got, want map[string]int) bool {
	for k, v := range got {
		if v != want[k] {
			return false
		}
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// TestLeaseOneSweeperAtATime races two instances for the lease: one leads,
// keeps leading while its lease lives, and hands over when it releases or
// its lease runs out.
func TestLeaseOneSweeperAtATime(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st backendStore) {
		c := testkit.NewClock(time.Now()) // idleness is measured from the store's wall-clock stamps
		e := engine.New(st, engine.Options{Now: c.Now})
		opts := sweeper.Options{Interval: time.Minute, Now: c.Now}
		sweepers := map[string]*sweeper.Sweeper{}
		for _, name := range []string{"a", "b"} {
			o := opts
			o.Holder = name
			sweepers[name] = sweeper.New(e, st, o)
		}
		led := func() []string {
			t.Helper()
			var mu sync.Mutex
			var out []string
			var wg sync.WaitGroup
			for name, sw := range sweepers {
				wg.Go(func() {
					rep, err := sw.Sweep(t.Context())
					if err != nil {
						t.Error(err)
					}
					if rep.Led {
						mu.Lock()
						out = append(out, name)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			return out
		}
		first := led()
		if len(first) != 1 {
			t.Fatalf("leaders = %v, want exactly one", first)
		}
		other := map[string]string{"a": "b", "b": "a"}[first[0]]
		c.Add(time.Minute)
		if got := led(); len(got) != 1 || got[0] != first[0] {
			t.Errorf("leaders while the lease lives = %v, want [%s]", got, first[0])
		}
		if err := sweepers[first[0]].Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if rep, err := sweepers[other].Sweep(t.Context()); err != nil || !rep.Led {
			t.Errorf("after release %s led = %v, %v; want true", other, rep.Led, err)
		}
		// The new holder stops sweeping; its lease runs out after three
		// intervals and the first takes over.
		c.Add(3*time.Minute + time.Millisecond)
		if rep, err := sweepers[first[0]].Sweep(t.Context()); err != nil || !rep.Led {
			t.Errorf("after expiry %s led = %v, %v; want true", first[0], rep.Led, err)
		}
	})
}
