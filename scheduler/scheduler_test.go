package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/schedule"
	"github.com/nqd-dev/nqd/scheduler"
	"github.com/nqd-dev/nqd/snapshots"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
	"github.com/nqd-dev/nqd/triggers"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// instance is one nqd: an engine and its scheduler on the shared store.
type instance struct {
	eng *engine.Engine
	sch *scheduler.Scheduler
}

func newInstance(t *testing.T, st engine.Store, c *testkit.Clock, obs ...scheduler.Observer) instance {
	e := engine.New(st, engine.Options{Now: c.Now, Lease: 10 * time.Second, Logger: testkit.Logger(t)})
	opts := scheduler.Options{Now: c.Now, Logger: testkit.Logger(t)}
	if len(obs) > 0 {
		opts.Observer = obs[0]
	}
	return instance{eng: e, sch: scheduler.New(e, st, opts)}
}

// countingObserver counts what the scheduler instances sharing it recorded.
type countingObserver struct{ fired, skipped atomic.Int64 }

func (o *countingObserver) Fired(source string, _ time.Duration) {
	if source == "schedule" {
		o.fired.Add(1)
	}
}
func (o *countingObserver) Skipped(_ string, n int) { o.skipped.Add(int64(n)) }

func mustDefine(t *testing.T, e *engine.Engine) {
	t.Helper()
	defs, err := flows.LoadDir("../flows/testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		if d.Name == "example-flow" {
			if err := e.PutDefinition(t.Context(), d); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("no example-flow in testdata")
}

// record is a schedule event as read back from its stream.
type record struct {
	Kind string
	Data struct {
		Source      string `json:"source"`
		ScheduledAt int64  `json:"scheduledAt"`
		Reason      string `json:"reason"`
		Count       int    `json:"count"`
	}
}

func readEvents(t *testing.T, st store.Store, c store.Context) []record {
	t.Helper()
	evs, err := st.Range(t.Context(), c, store.RangeQuery{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]record, len(evs))
	for i, ev := range evs {
		out[i].Kind = ev.Kind
		if len(ev.Data) > 0 && strings.HasPrefix(ev.Kind, "schedule.") {
			if err := json.Unmarshal(ev.Data, &out[i].Data); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// firedDues lists the due times (seconds after t0) of c's scheduled fires.
func firedDues(t *testing.T, st store.Store, c store.Context) []int {
	var out []int
	for _, r := range readEvents(t, st, c) {
		if r.Kind == "schedule.fired" && r.Data.Source == "schedule" {
			out = append(out, int(time.UnixMilli(r.Data.ScheduledAt).Sub(t0)/time.Second))
		}
	}
	return out
}

// crashing is an instance's store that dies right after it recorded its
// first fire once armed: the fire is stored, the flows it fires are not
// started, and the instance does nothing more.
type crashing struct {
	engine.Store
	armed, dead atomic.Bool
}

var errDead = errors.New("instance killed")

func (s *crashing) UpdateRun(ctx context.Context, u store.RunUpdate) (store.AppendResult, error) {
	if s.dead.Load() {
		return store.AppendResult{}, errDead
	}
	res, err := s.Store.UpdateRun(ctx, u)
	if err == nil && s.armed.Load() && slices.ContainsFunc(u.Events, func(e event.Event) bool { return e.Kind == "schedule.fired" }) {
		s.dead.Store(true)
		return store.AppendResult{}, errDead
	}
	return res, err
}

// Three instances share a store and tick on one clock, every 250ms for an
// hour, racing for a one-second schedule; one of them is killed half way,
// right after recording a fire and before starting its flow. Each due time
// fires once and starts one run.
func TestThreeInstancesFireEachDueTimeOnce(t *testing.T) {
	backendtest.Each(t, backendtest.All, func(t *testing.T, be backendtest.Backend) {
		if be.Name == backendtest.Embedded {
			t.Skip("the embedded store serves one instance")
		}
		ctx := t.Context()
		st := be.Open(t)
		c := testkit.NewClock(t0)
		victim := &crashing{Store: st}
		obs := &countingObserver{}
		nodes := []instance{newInstance(t, victim, c, obs), newInstance(t, st, c, obs), newInstance(t, st, c, obs)}
		mustDefine(t, nodes[1].eng)
		sc := store.Context{Type: scheduler.FlowStream, ID: "every-second"}
		spec := schedule.Spec{Interval: 1, Overlap: schedule.OverlapAllow}
		if _, err := nodes[1].sch.Put(ctx, sc, spec, []scheduler.Target{{FlowName: "example-flow"}}, nil); err != nil {
			t.Fatal(err)
		}
		const hour = 3600
		tick := func() {
			var wg sync.WaitGroup
			for i, n := range nodes {
				if i == 0 && victim.dead.Load() {
					continue
				}
				wg.Go(func() { _ = n.eng.Tick(ctx) })
			}
			wg.Wait()
		}
		for c.Now().Before(t0.Add(hour * time.Second)) {
			c.Add(250 * time.Millisecond)
			if c.Now().Equal(t0.Add(hour / 2 * time.Second)) {
				victim.armed.Store(true)
			}
			tick()
		}
		if !victim.dead.Load() {
			t.Fatal("the instance meant to die never recorded a fire")
		}
		// Stop the schedule and let the last fires settle.
		if _, err := nodes[1].sch.SetPaused(ctx, sc, true); err != nil {
			t.Fatal(err)
		}
		for range 40 {
			c.Add(250 * time.Millisecond)
			tick()
		}
		dues := firedDues(t, st, sc)
		if len(dues) < hour {
			t.Fatalf("%d fires, want at least %d", len(dues), hour)
		}
		for i, d := range dues {
			if d != i+1 {
				t.Fatalf("fire %d is of due time %ds, want %ds (dues %v...)", i, d, i+1, dues[max(i-3, 0):min(i+3, len(dues))])
			}
		}
		for _, r := range readEvents(t, st, sc) {
			if r.Kind == "schedule.skipped" {
				t.Errorf("skipped %d due times: %s", r.Data.Count, r.Data.Reason)
			}
		}
		// The victim's last fire was written but its instance died
		// before it could count it.
		if n := obs.fired.Load(); n != int64(len(dues))-1 || obs.skipped.Load() != 0 {
			t.Errorf("observed %d fires and %d skips, want %d fires", n, obs.skipped.Load(), len(dues)-1)
		}
		page, err := st.ListRuns(ctx, "example-flow", "", 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if page.Total != int64(len(dues)) {
			t.Errorf("%d runs for %d fires", page.Total, len(dues))
		}
		got, err := nodes[2].sch.Get(ctx, sc)
		if err != nil {
			t.Fatal(err)
		}
		if got.RunCount != len(dues) || got.FailCount != 0 || len(got.Pending) != 0 {
			t.Errorf("schedule state: runCount %d failCount %d pending %v, want %d fires", got.RunCount, got.FailCount, got.Pending, len(dues))
		}
	})
}

// nqd is stopped from 90s to 400s across five due times of a one-minute
// schedule and started again: the new instance applies the misfire policy.
func TestRestartAppliesMisfirePolicy(t *testing.T) {
	tests := []struct {
		misfire string
		window  float64
		max     int
		fired   []int
		skipped map[string]int
	}{
		{schedule.MisfireSkip, 0, 0, []int{60, 420, 480}, map[string]int{schedule.ReasonMisfire: 5}},
		{schedule.MisfireFireOnce, 0, 0, []int{60, 360, 420, 480}, map[string]int{schedule.ReasonMisfire: 4}},
		{schedule.MisfireCatchUp, 200, 2, []int{60, 300, 360, 420, 480}, map[string]int{schedule.ReasonCatchUpWindow: 2, schedule.ReasonCatchUpMax: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.misfire, func(t *testing.T) {
			backendtest.Each(t, backendtest.All, func(t *testing.T, be backendtest.Backend) {
				ctx := t.Context()
				st := be.Open(t)
				c := testkit.NewClock(t0)
				before := newInstance(t, st, c)
				mustDefine(t, before.eng)
				sc := store.Context{Type: scheduler.FlowStream, ID: "minutely"}
				spec := schedule.Spec{Interval: 60, MisfireGrace: 10, Misfire: tt.misfire, CatchUpWindow: tt.window, CatchUpMax: tt.max, Overlap: schedule.OverlapAllow}
				if _, err := before.sch.Put(ctx, sc, spec, []scheduler.Target{{FlowName: "example-flow"}}, nil); err != nil {
					t.Fatal(err)
				}
				for c.Now().Before(t0.Add(90 * time.Second)) {
					c.Add(time.Second)
					must(t, before.eng.Tick(ctx))
				}
				c.Set(t0.Add(400 * time.Second))
				after := newInstance(t, st, c)
				for c.Now().Before(t0.Add(500 * time.Second)) {
					must(t, after.eng.Tick(ctx))
					c.Add(time.Second)
				}
				if got := firedDues(t, st, sc); !slices.Equal(got, tt.fired) {
					t.Errorf("fired due times %v, want %v", got, tt.fired)
				}
				skipped := map[string]int{}
				for _, r := range readEvents(t, st, sc) {
					if r.Kind == "schedule.skipped" {
						skipped[r.Data.Reason] += r.Data.Count
					}
				}
				if !mapsEqual(skipped, tt.skipped) {
					t.Errorf("skipped %v, want %v", skipped, tt.skipped)
				}
			})
		})
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A schedule trigger of the registry gets its schedule on Sync; each due
// time fires the trigger once, which starts its subscribed flow; an
// inactive trigger's schedule pauses and a deleted one's goes.
func TestScheduleTriggersFireThroughTheRegistry(t *testing.T) {
	ctx := t.Context()
	st := bolttest.Open(t, boltstore.Options{})
	c := testkit.NewClock(t0)
	states := snapshots.New(st, snapshots.Options{Logger: testkit.Logger(t)})
	t.Cleanup(func() { _ = states.Close() })
	e := engine.New(st, engine.Options{Now: c.Now, Lease: 10 * time.Second, Logger: testkit.Logger(t)})
	reg := triggers.New(st, states, e, triggers.Options{Now: c.Now, Logger: testkit.Logger(t)})
	sch := scheduler.New(e, st, scheduler.Options{Now: c.Now, Logger: testkit.Logger(t), Registry: reg})
	mustDefine(t, e)
	_, err := reg.Create(ctx, triggers.Spec{Name: "nightly", Type: triggers.TypeSchedule, Scope: triggers.ScopeFlow,
		Config: json.RawMessage(`{"cron":"0 2 * * *","timezone":"Europe/Berlin"}`), Subscriptions: []string{"example-flow"}})
	must(t, err)
	must(t, sch.Sync(ctx))
	sc := store.Context{Type: scheduler.TriggerStream, ID: "nightly"}
	got, err := sch.Get(ctx, sc)
	must(t, err)
	if want := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC).UnixMilli(); got.NextRun != want {
		t.Fatalf("next run %v, want 02:00 Berlin", time.UnixMilli(got.NextRun).UTC())
	}
	// No worker runs the flow: its run is ended each day, so that the
	// default overlap policy (skip) lets the next day's fire through.
	for range 3 {
		for range 24 * 60 {
			c.Add(time.Minute)
			must(t, e.Tick(ctx))
		}
		page, err := st.ListRuns(ctx, "example-flow", store.RunRunning, 0, 10)
		must(t, err)
		for _, m := range page.Runs {
			_, err := e.Cancel(ctx, "example-flow", m.RunID, "test")
			must(t, err)
		}
	}
	tr, err := reg.Get(ctx, "nightly")
	must(t, err)
	if tr.Stats.TotalFires != 3 || tr.Stats.TotalFlowsStarted != 3 {
		t.Errorf("trigger stats %+v, want 3 fires that started 3 flows", tr.Stats)
	}
	if got := firedDues(t, st, sc); len(got) != 3 {
		t.Errorf("fired due times %v, want 3", got)
	}
	if page, err := st.ListRuns(ctx, "example-flow", "", 0, 1); err != nil || page.Total != 3 {
		t.Errorf("%d runs (%v), want 3", page.Total, err)
	}

	inactive := triggers.StatusInactive
	_, err = reg.Update(ctx, "nightly", triggers.Patch{Status: &inactive})
	must(t, err)
	must(t, sch.Sync(ctx))
	if got, err := sch.Get(ctx, sc); err != nil || !got.State.Paused || got.NextRun != 0 {
		t.Fatalf("inactive trigger's schedule: %+v, %v", got, err)
	}
	must(t, reg.Delete(ctx, "nightly"))
	must(t, sch.Sync(ctx))
	if _, err := sch.Get(ctx, sc); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted trigger's schedule: %v", err)
	}
}

// A one-time schedule fires its one due time and then stays paused.
func TestOneTimeScheduleFiresOnce(t *testing.T) {
	ctx := t.Context()
	st := bolttest.Open(t, boltstore.Options{})
	c := testkit.NewClock(t0)
	n := newInstance(t, st, c)
	mustDefine(t, n.eng)
	sc := store.Context{Type: scheduler.FlowStream, ID: "later"}
	if _, err := n.sch.PutOnce(ctx, sc, 5*time.Second, []scheduler.Target{{FlowName: "example-flow"}}, nil); err != nil {
		t.Fatal(err)
	}
	for range 60 {
		c.Add(time.Second)
		must(t, n.eng.Tick(ctx))
	}
	if got := firedDues(t, st, sc); !slices.Equal(got, []int{5}) {
		t.Errorf("fired due times %v, want [5]", got)
	}
	got, err := n.sch.Get(ctx, sc)
	must(t, err)
	if !got.State.Paused || got.NextRun != 0 || got.RunCount != 1 {
		t.Errorf("after its fire: paused %v, nextRun %d, runCount %d", got.State.Paused, got.NextRun, got.RunCount)
	}
}
