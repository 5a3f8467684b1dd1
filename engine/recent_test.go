package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
)

// countingStore counts the reads a decision can spare. It reports the
// features set in it, none unless a test gives it some of its store's.
type countingStore struct {
	engine.Store
	features                               store.Features
	runMeta, job, claims, appends, updates atomic.Int64
}

func (s *countingStore) Features() store.Features { return s.features }

func (s *countingStore) Append(ctx context.Context, c store.Context, evs []event.Event, opts store.AppendOptions) (store.AppendResult, error) {
	s.appends.Add(1)
	return s.Store.Append(ctx, c, evs, opts)
}

func (s *countingStore) UpdateRun(ctx context.Context, u store.RunUpdate) (store.AppendResult, error) {
	s.updates.Add(1)
	return s.Store.UpdateRun(ctx, u)
}

func (s *countingStore) Claim(ctx context.Context, queues []string, now, leaseUntil int64, lease string, max int) ([]store.Job, error) {
	defer s.claims.Add(1)
	return s.Store.Claim(ctx, queues, now, leaseUntil, lease, max)
}

func (s *countingStore) RunMeta(ctx context.Context, flow, run string) (store.RunMeta, error) {
	s.runMeta.Add(1)
	return s.Store.RunMeta(ctx, flow, run)
}

func (s *countingStore) Job(ctx context.Context, ref store.JobRef) (store.Job, error) {
	s.job.Add(1)
	return s.Store.Job(ctx, ref)
}

// A completion of a job this instance handed out, of a run it last wrote,
// reads neither the job nor the run record from the store: the update's
// version and ack checks stand in for them.
func TestCompleteSparesReads(t *testing.T) {
	forEachBackend(t, func(t *testing.T, inner engine.Store) {
		ctx := t.Context()
		st := &countingStore{Store: inner}
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := newEngine(t, st, c)
		mustDefine(t, e, "diamond", "diamond")
		started, err := e.Start(ctx, "diamond", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Start(ctx, "diamond", nil, ""); err != nil {
			t.Fatal(err)
		}
		// One claim hands out both entry jobs under one lease.
		jobs, err := e.Claim(ctx, []string{"default"}, 2, 0)
		if err != nil || len(jobs) != 2 {
			t.Fatalf("claim = %v, %v", jobs, err)
		}
		st.runMeta.Store(0)
		st.job.Store(0)
		for _, j := range jobs {
			if err := e.Complete(ctx, store.JobAck{Queue: j.Queue, ID: j.ID, Lease: j.Lease}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if n, m := st.job.Load(), st.runMeta.Load(); n != 0 || m != 0 {
			t.Errorf("two completions read jobs %d and run records %d times; want 0", n, m)
		}
		i := slices.IndexFunc(jobs, func(j store.Job) bool { return j.RunID == started.FlowID })
		ack := store.JobAck{Queue: "default", ID: jobs[i].ID, Lease: jobs[i].Lease}
		// A repeat of the same completion is answered from the store as
		// before: the job is gone and the run says this lease finished it.
		if err := e.Complete(ctx, ack, nil); err != nil {
			t.Errorf("repeated complete: %v", err)
		}
		got := kinds(t, inner, started.FlowID)
		if count(got, "step.completed start") != 1 {
			t.Errorf("events = %v", got)
		}
	})
}

// An instance whose remembered run record is stale (another instance wrote
// the run since) decides again from the store's record: the fan-in still
// queues the final step once, and a run another instance ended is not
// written to.
func TestStaleRecentRecord(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		ctx := t.Context()
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		a, b := newEngine(t, st, c), newEngine(t, st, c)
		mustDefine(t, a, "diamond", "diamond")
		claim := func(e *engine.Engine) store.JobAck {
			t.Helper()
			jobs, err := e.Claim(ctx, []string{"default"}, 1, 0)
			if err != nil || len(jobs) != 1 {
				t.Fatalf("claim = %v, %v", jobs, err)
			}
			return store.JobAck{Queue: "default", ID: jobs[0].ID, Lease: jobs[0].Lease}
		}
		emit := func(e *engine.Engine, ack store.JobAck, names ...string) {
			t.Helper()
			for _, n := range names {
				ev := event.Event{Kind: "emit", Data: json.RawMessage(`{"event":"` + n + `"}`)}
				if _, err := e.Report(ctx, ack, []event.Event{ev}, ""); err != nil {
					t.Fatal(err)
				}
			}
		}
		complete := func(e *engine.Engine, ack store.JobAck) {
			t.Helper()
			if err := e.Complete(ctx, ack, nil); err != nil {
				t.Fatal(err)
			}
		}

		started, err := a.Start(ctx, "diamond", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		entry := claim(a)
		emit(a, entry, "step.a.trigger", "step.b.trigger")
		complete(a, entry) // a remembers the run after its completion
		first, second := claim(a), claim(b)
		// b writes the run twice; a's record is now two versions behind.
		emit(b, second, "step."+stepLetter(second)+".done")
		complete(b, second)
		emit(a, first, "step."+stepLetter(first)+".done")
		complete(a, first)
		final := claim(a)
		if final.ID != started.FlowID+":final" {
			t.Fatalf("claimed %s; want the final step", final.ID)
		}
		complete(a, final)
		got := kinds(t, st, started.FlowID)
		if count(got, "flow.completed") != 1 || count(got, "step.completed final") != 1 {
			t.Errorf("events = %v", got)
		}

		// a starts a run and holds its entry job; b cancels the run.
		started, err = a.Start(ctx, "diamond", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		held := claim(a)
		if _, err := b.Cancel(ctx, "diamond", started.FlowID, "user"); err != nil {
			t.Fatal(err)
		}
		if err := a.Complete(ctx, held, nil); !errors.Is(err, engine.ErrLeaseLost) {
			t.Errorf("complete after another instance canceled the run: %v; want ErrLeaseLost", err)
		}
		got = kinds(t, st, started.FlowID)
		if count(got, "step.completed start") != 0 || got[len(got)-1] != "flow.cancelled" {
			t.Errorf("events = %v", got)
		}
	})
}

// stepLetter is a or b for the job of parallelA or parallelB.
func stepLetter(ack store.JobAck) string {
	if ack.ID[len(ack.ID)-1] == 'A' {
		return "a"
	}
	return "b"
}

// A report about a job this instance handed out reads no job from the
// store: its appends and the emits' updates name the lease. A lease that was
// lost meanwhile is still answered ErrLeaseLost, with nothing written: after
// the job was taken over (for a log, an emit, and an emit already counted),
// and after another instance cancelled the run.
func TestReportSparesJobRead(t *testing.T) {
	forEachBackend(t, func(t *testing.T, inner engine.Store) {
		ctx := t.Context()
		st := &countingStore{Store: inner}
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		a, b := newEngine(t, st, c), newEngine(t, inner, c)
		mustDefine(t, a, "diamond", "diamond")
		ackOf := func(j store.Job) store.JobAck { return store.JobAck{Queue: j.Queue, ID: j.ID, Lease: j.Lease} }
		emit := func(ack store.JobAck, name string) error {
			_, err := a.Report(ctx, ack, []event.Event{{Kind: "emit", Data: json.RawMessage(`{"event":"` + name + `"}`)}}, "")
			return err
		}

		// The lease of a job with retries runs out and b takes the job
		// over: a's emits with the old lease are refused, of a new name
		// and of one b's emit counted already.
		mustDefine(t, a, "example-flow", "example-flow")
		run2, err := a.Start(ctx, "example-flow", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		old := ackOf(claimOf(t, a, run2.FlowID))
		c.Add(time.Minute)
		over := claimOf(t, b, run2.FlowID)
		if over.ID != old.ID || over.Attempt != 2 {
			t.Fatalf("b claimed %+v; want %s as attempt 2", over, old.ID)
		}
		before := kinds(t, inner, run2.FlowID)
		if _, err := a.Report(ctx, old, []event.Event{{Kind: "log", Data: json.RawMessage(`{"level":"info","msg":"late"}`)}}, "k"); !errors.Is(err, engine.ErrLeaseLost) {
			t.Errorf("log under the lost lease: %v; want ErrLeaseLost", err)
		}
		if err := emit(old, "fetch_data.completed"); !errors.Is(err, engine.ErrLeaseLost) {
			t.Errorf("emit under the lost lease: %v; want ErrLeaseLost", err)
		}
		if _, err := b.Report(ctx, ackOf(over), []event.Event{{Kind: "emit", Data: json.RawMessage(`{"event":"fetch_data.completed"}`)}}, ""); err != nil {
			t.Fatal(err)
		}
		if err := emit(old, "fetch_data.completed"); !errors.Is(err, engine.ErrLeaseLost) {
			t.Errorf("emit of a counted name under the lost lease: %v; want ErrLeaseLost", err)
		}
		if got := kinds(t, inner, run2.FlowID); len(got) != len(before)+1 || count(got, "emit fetch_data") != 1 {
			t.Errorf("events = %v; want b's emit alone after %v", got, before)
		}

		// Reports about a job a handed out read no job.
		run1, err := a.Start(ctx, "diamond", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		entry := ackOf(claimOf(t, a, run1.FlowID))
		st.job.Store(0)
		first := []event.Event{{Kind: "step.started"}, {Kind: "emit", Data: json.RawMessage(`{"event":"step.a.trigger"}`)}}
		if _, err := a.Report(ctx, entry, first, "k1"); err != nil {
			t.Fatal(err)
		}
		if err := emit(entry, "step.b.trigger"); err != nil {
			t.Fatal(err)
		}
		if n := st.job.Load(); n != 0 {
			t.Errorf("two reports read the job %d times; want 0", n)
		}
		if got := kinds(t, inner, run1.FlowID); count(got, "step.started start") != 1 || count(got, "emit start") != 2 {
			t.Errorf("events = %v", got)
		}

		// b cancels a run whose entry job a holds.
		run3, err := a.Start(ctx, "diamond", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		held := ackOf(claimOf(t, a, run3.FlowID))
		if _, err := b.Cancel(ctx, "diamond", run3.FlowID, "user"); err != nil {
			t.Fatal(err)
		}
		if err := emit(held, "step.a.trigger"); !errors.Is(err, engine.ErrLeaseLost) {
			t.Errorf("emit after another instance cancelled the run: %v; want ErrLeaseLost", err)
		}
		if got := kinds(t, inner, run3.FlowID); count(got, "emit start") != 0 {
			t.Errorf("events = %v", got)
		}
	})
}

// claimOf claims every ready job through e and returns run's.
func claimOf(t *testing.T, e *engine.Engine, run string) store.Job {
	t.Helper()
	jobs, err := e.Claim(t.Context(), []string{"default"}, 100, 0)
	if i := slices.IndexFunc(jobs, func(j store.Job) bool { return j.RunID == run }); err == nil && i >= 0 {
		return jobs[i]
	}
	t.Fatalf("claim = %v, %v; want a job of run %s", jobs, err, run)
	return store.Job{}
}

// A completion that takes its worker's next job does so in its own write,
// without a claim of its own in the store, as long as jobs are ready; then
// it answers none. On a store that cannot, the completion stands and the
// caller is told to claim.
func TestCompleteClaimingTakesTheNextJobInItsWrite(t *testing.T) {
	ctx := t.Context()
	inner := bolttest.Open(t, boltstore.Options{})
	st := &countingStore{Store: inner, features: store.Features{ClaimsInUpdate: true}}
	e := engine.New(st, engine.Options{Lease: 10 * time.Second, Logger: testkit.Logger(t)})
	mustDefine(t, e, "diamond", "diamond")
	runs := map[string]bool{}
	for range 3 {
		s, err := e.Start(ctx, "diamond", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		runs[s.FlowID] = true
	}
	first, err := e.Claim(ctx, []string{"default"}, 1, 0)
	if err != nil || len(first) != 1 {
		t.Fatalf("claim = %+v, %v", first, err)
	}
	claims := st.claims.Load()
	next := engine.Next{Queues: []string{"default"}, Max: 1}
	j := first[0]
	for i := range 3 {
		jobs, claimed, err := e.CompleteClaiming(ctx, store.JobAck{Queue: j.Queue, ID: j.ID, Lease: j.Lease}, nil, next)
		if err != nil || !claimed {
			t.Fatalf("completion %d = %+v, %v, %v", i, jobs, claimed, err)
		}
		delete(runs, j.RunID)
		if i == 2 {
			if len(jobs) != 0 {
				t.Fatalf("the last completion claimed %+v; want none", jobs)
			}
			break
		}
		if len(jobs) != 1 || !runs[jobs[0].RunID] || jobs[0].Lease == "" {
			t.Fatalf("completion %d claimed %+v; want the entry job of another run", i, jobs)
		}
		j = jobs[0]
	}
	if n := st.claims.Load() - claims; n != 0 {
		t.Errorf("the completions claimed %d times on their own; want none", n)
	}
	if len(runs) != 0 {
		t.Errorf("runs never completed: %v", runs)
	}

	plain := engine.New(&countingStore{Store: inner}, engine.Options{Lease: 10 * time.Second, Logger: testkit.Logger(t)})
	s, err := plain.Start(ctx, "diamond", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	held := claimOf(t, plain, s.FlowID)
	jobs, claimed, err := plain.CompleteClaiming(ctx, store.JobAck{Queue: held.Queue, ID: held.ID, Lease: held.Lease}, nil, next)
	if err != nil || claimed || jobs != nil {
		t.Fatalf("completion on a store that cannot claim in it = %+v, %v, %v; want no claim", jobs, claimed, err)
	}
	if k := kinds(t, inner, s.FlowID); count(k, "step.completed start") != 1 {
		t.Errorf("events = %v", k)
	}
}

// overlapStore, once armed, holds the first run update until told, and
// says when it arrived.
type overlapStore struct {
	countingStore
	armed           atomic.Bool
	updates         atomic.Int64
	arrived, decide chan struct{}
}

func (s *overlapStore) UpdateRun(ctx context.Context, u store.RunUpdate) (store.AppendResult, error) {
	if s.armed.Load() && s.updates.Add(1) == 1 {
		close(s.arrived)
		<-s.decide
	}
	return s.countingStore.UpdateRun(ctx, u)
}

// Two decisions about one run that overlap on one instance, the second
// made while the first is at the store, take turns with the record the
// instance wrote last: neither reads the run record from the store, and
// the store refuses neither, since the second starts from the record the
// first wrote. The fan-in they feed still queues its step once.
func TestOverlappingDecisionsTakeTurns(t *testing.T) {
	forEachBackend(t, func(t *testing.T, inner engine.Store) {
		ctx := t.Context()
		st := &overlapStore{countingStore: countingStore{Store: inner}, arrived: make(chan struct{}), decide: make(chan struct{})}
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := newEngine(t, inner, c)
		mustDefine(t, e, "diamond", "diamond")
		started, err := e.Start(ctx, "diamond", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		emit := func(e *engine.Engine, j store.Job, name string) error {
			ack := store.JobAck{Queue: j.Queue, ID: j.ID, Lease: j.Lease}
			_, err := e.Report(ctx, ack, []event.Event{{Kind: "emit", Data: json.RawMessage(`{"event":"` + name + `"}`)}}, "")
			return err
		}
		entry, err := e.Claim(ctx, []string{"default"}, 1, 0)
		if err != nil || len(entry) != 1 {
			t.Fatalf("claim = %v, %v", entry, err)
		}
		for _, n := range []string{"step.a.trigger", "step.b.trigger"} {
			if err := emit(e, entry[0], n); err != nil {
				t.Fatal(err)
			}
		}
		// The engine under test remembers the run from its own completion
		// of the entry step, and hands out both branches in one claim.
		e = newEngine(t, st, c)
		if err := e.Complete(ctx, store.JobAck{Queue: "default", ID: entry[0].ID, Lease: entry[0].Lease}, nil); err != nil {
			t.Fatal(err)
		}
		branches, err := e.Claim(ctx, []string{"default"}, 2, 0)
		if err != nil || len(branches) != 2 {
			t.Fatalf("claim = %v, %v", branches, err)
		}
		st.runMeta.Store(0)
		st.armed.Store(true)
		done := make(chan error, 2)
		send := func(b store.Job) {
			go func() { done <- emit(e, b, "step."+stepLetter(store.JobAck{ID: b.ID})+".done") }()
		}
		send(branches[0])
		<-st.arrived
		send(branches[1])
		close(st.decide)
		for range branches {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		if n := st.updates.Load(); n != 2 {
			t.Errorf("%d run updates; want 2, none refused", n)
		}
		if n := st.runMeta.Load(); n != 0 {
			t.Errorf("the overlapping decisions read the run record %d times; want 0", n)
		}
		final, err := e.Claim(ctx, []string{"default"}, 2, 0)
		if err != nil || len(final) != 1 || final[0].ID != started.FlowID+":final" {
			t.Fatalf("claim = %v, %v; want the final step once", final, err)
		}
	})
}
