package engine_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
)

// leasing is the one feature of the stores of the hand-over tests: they
// enqueue a job claimed.
var leasing = store.Features{EnqueuesLeased: true}

type claimResult struct {
	jobs []store.Job
	err  error
}

// waitingClaim starts a long-polling claim and returns once it waits.
func waitingClaim(t *testing.T, e *engine.Engine) <-chan claimResult {
	t.Helper()
	waiting := e.Waiting()
	out := make(chan claimResult, 1)
	go func() {
		jobs, err := e.Claim(t.Context(), []string{"default"}, 4, 10*time.Second)
		out <- claimResult{jobs, err}
	}()
	wait.For(t, 5*time.Second, time.Millisecond, "the claim to wait", func() bool { return e.Waiting() > waiting })
	return out
}

// newWaitingEngine is an engine on inner that counts its store's claims, and
// whose claims look at the store again only when woken or handed a job: its
// poll interval outlasts any test.
func newWaitingEngine(t *testing.T, inner engine.Store) (*countingStore, *engine.Engine) {
	st := &countingStore{Store: inner, features: leasing}
	return st, engine.New(st, engine.Options{Lease: 10 * time.Second, PollInterval: time.Hour, Logger: testkit.Logger(t)})
}

// answer waits for the answer of a claim waitingClaim started.
func answer(t *testing.T, got <-chan claimResult) claimResult {
	t.Helper()
	select {
	case res := <-got:
		return res
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting claim got nothing")
		return claimResult{}
	}
}

// leasingBackends are the stores that can enqueue a job claimed.
var leasingBackends = []struct {
	name string
	open func(t *testing.T) engine.Store
}{
	{"bolt", func(t *testing.T) engine.Store { return bolttest.Open(t, boltstore.Options{}) }},
	{"redis", func(t *testing.T) engine.Store { return backendtest.OpenRedis(t, "") }},
}

// eachLeasingBackend runs test on every store that enqueues a job claimed,
// checking that it says so.
func eachLeasingBackend(t *testing.T, test func(t *testing.T, inner engine.Store)) {
	for _, b := range leasingBackends {
		t.Run(b.name, func(t *testing.T) {
			inner := b.open(t)
			if !inner.Features().EnqueuesLeased {
				t.Fatalf("%T does not enqueue jobs claimed", inner)
			}
			test(t, inner)
		})
	}
}

// A start hands its first job to a claim waiting on the same instance in
// its own commit (or script call): the claim gets the job without a claim
// of its own in the store, the store holds the job under the lease the
// claim answered, and the job is handed out once.
func TestStartHandsJobToWaitingClaim(t *testing.T) {
	eachLeasingBackend(t, testStartHandsJobToWaitingClaim)
}

func testStartHandsJobToWaitingClaim(t *testing.T, inner engine.Store) {
	ctx := t.Context()
	st, e := newWaitingEngine(t, inner)
	mustDefine(t, e, "diamond", "diamond")

	got := waitingClaim(t, e)
	claims := st.claims.Load()
	started, err := e.Start(ctx, "diamond", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	res := answer(t, got)
	if res.err != nil || len(res.jobs) != 1 || res.jobs[0].ID != started.ID || res.jobs[0].Lease == "" || res.jobs[0].Attempt != 1 {
		t.Fatalf("claim = %+v, %v; want the run's entry job under a lease", res.jobs, res.err)
	}
	if n := st.claims.Load(); n != claims {
		t.Errorf("the store was asked for %d claims after the start; want none", n-claims)
	}
	j, err := inner.Job(ctx, store.JobRef{Queue: "default", ID: started.ID})
	if err != nil || j.Lease != res.jobs[0].Lease || j.LeaseUntil != res.jobs[0].LeaseUntil {
		t.Fatalf("stored job = %+v, %v; want it held under the claim's lease", j, err)
	}
	// Another instance looks at the store, where the job is held.
	other := engine.New(st, engine.Options{Lease: 10 * time.Second, Logger: testkit.Logger(t)})
	looked := st.claims.Load()
	if again, err := other.Claim(ctx, []string{"default"}, 4, 0); err != nil || len(again) != 0 || st.claims.Load() == looked {
		t.Errorf("a second claim got %+v, %v; want nothing, from the store", again, err)
	}
	if err := e.Complete(ctx, store.JobAck{Queue: "default", ID: started.ID, Lease: res.jobs[0].Lease}, nil); err != nil {
		t.Fatal(err)
	}
	if k := kinds(t, inner, started.FlowID); count(k, "step.completed start") != 1 {
		t.Errorf("events = %v", k)
	}
	// Past its lease a handed-over job is taken back like any claimed one:
	// the start step allows one attempt, so the step and the run fail.
	got = waitingClaim(t, e)
	started, err = e.Start(ctx, "diamond", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if res := <-got; res.err != nil || len(res.jobs) != 1 || res.jobs[0].ID != started.ID {
		t.Fatalf("claim = %+v, %v", res.jobs, res.err)
	}
	later := engine.New(st, engine.Options{Now: func() time.Time { return time.Now().Add(11 * time.Second) }, Logger: testkit.Logger(t)})
	redelivered, err := later.Claim(ctx, []string{"default"}, 4, 0)
	if err != nil || len(redelivered) != 0 {
		t.Errorf("after the lease: claim = %+v, %v; want nothing", redelivered, err)
	}
	if k := kinds(t, inner, started.FlowID); k[len(k)-1] != "flow.failed" {
		t.Errorf("events after the lease = %v; want the run failed", k)
	}
}

// A paused queue is not handed a job: the start stores it waiting, the
// waiting claim gets nothing, and the job is claimed once the queue runs
// again.
func TestStartHandsNothingToPausedQueue(t *testing.T) {
	eachLeasingBackend(t, testStartHandsNothingToPausedQueue)
}

func testStartHandsNothingToPausedQueue(t *testing.T, inner engine.Store) {
	ctx := t.Context()
	st, e := newWaitingEngine(t, inner)
	mustDefine(t, e, "diamond", "diamond")
	if err := inner.SetQueuePaused(ctx, "default", true); err != nil {
		t.Fatal(err)
	}
	got := waitingClaim(t, e)
	looked := st.claims.Load()
	started, err := e.Start(ctx, "diamond", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	// The start's commit wakes the claim, which finds the queue paused and
	// waits again; it must not have been handed the job.
	wait.For(t, 5*time.Second, time.Millisecond, "the woken claim to look again", func() bool { return st.claims.Load() > looked })
	select {
	case res := <-got:
		t.Fatalf("claim on a paused queue = %+v, %v", res.jobs, res.err)
	default:
	}
	j, err := inner.Job(ctx, store.JobRef{Queue: "default", ID: started.ID})
	if err != nil || j.Lease != "" {
		t.Fatalf("stored job = %+v, %v; want it waiting", j, err)
	}
	// Resuming the queue wakes the waiting claim, which takes the job.
	if err := e.SetQueuePaused(ctx, "default", false); err != nil {
		t.Fatal(err)
	}
	if res := answer(t, got); res.err != nil || len(res.jobs) != 1 || res.jobs[0].ID != started.ID {
		t.Errorf("claim after resume = %+v, %v", res.jobs, res.err)
	}
}

// An emit that makes one step ready hands that step's job to a claim
// waiting on the same instance, as a start does; when the step's queue is
// paused the emit is stored all the same and the job waits.
func TestEmitHandsJobToWaitingClaim(t *testing.T) {
	eachLeasingBackend(t, func(t *testing.T, inner engine.Store) {
		ctx := t.Context()
		st, e := newWaitingEngine(t, inner)
		if err := e.PutDefinition(ctx, &flows.Definition{Name: "chain", Entry: "a", Steps: map[string]flows.Step{
			"a": {Queue: "default", Emits: []string{"x"}},
			"b": {Queue: "default", Subscribes: []string{"x"}},
		}}); err != nil {
			t.Fatal(err)
		}
		// runA starts a run and claims its first step's job.
		runA := func() (engine.Started, store.JobAck) {
			t.Helper()
			started, err := e.Start(ctx, "chain", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			jobs, err := e.Claim(ctx, []string{"default"}, 1, 0)
			if err != nil || len(jobs) != 1 || jobs[0].RunID != started.FlowID {
				t.Fatalf("claim = %+v, %v; want the run's first job", jobs, err)
			}
			return started, store.JobAck{Queue: "default", ID: jobs[0].ID, Lease: jobs[0].Lease}
		}

		started, ack := runA()
		got := waitingClaim(t, e)
		claims := st.claims.Load()
		if _, err := e.Report(ctx, ack, emitEvents("x"), ""); err != nil {
			t.Fatal(err)
		}
		res := answer(t, got)
		if res.err != nil || len(res.jobs) != 1 || res.jobs[0].RunID != started.FlowID || res.jobs[0].Step != "b" {
			t.Fatalf("claim = %+v, %v; want step b of the run", res.jobs, res.err)
		}
		if n := st.claims.Load() - claims; n != 0 {
			t.Errorf("the store was asked for %d claims after the emit; want none", n)
		}
		j, err := inner.Job(ctx, store.JobRef{Queue: "default", ID: res.jobs[0].ID})
		if err != nil || j.Lease != res.jobs[0].Lease {
			t.Fatalf("stored job = %+v, %v; want it held under the claim's lease", j, err)
		}

		started, ack = runA()
		if err := inner.SetQueuePaused(ctx, "default", true); err != nil {
			t.Fatal(err)
		}
		// Two claims wait, so that a second try at handing the job over
		// would find one even while the first refused is still on its way
		// back to the list.
		got, got2 := waitingClaim(t, e), waitingClaim(t, e)
		if _, err := e.Report(ctx, ack, emitEvents("x"), ""); err != nil {
			t.Fatalf("emit on a paused queue: %v", err)
		}
		select {
		case res := <-got:
			t.Fatalf("claim on a paused queue = %+v, %v", res.jobs, res.err)
		case res := <-got2:
			t.Fatalf("claim on a paused queue = %+v, %v", res.jobs, res.err)
		default:
		}
		j, err = inner.Job(ctx, store.JobRef{Queue: "default", ID: started.FlowID + ":b"})
		if err != nil || j.Lease != "" {
			t.Fatalf("stored job = %+v, %v; want it waiting", j, err)
		}
	})
}

// On a store that cannot take a job claimed nothing is ever handed over,
// so a handed claim answers at once instead of waiting.
func TestHandedClaimWithoutHandOversDoesNotWait(t *testing.T) {
	st := &countingStore{Store: bolttest.Open(t, boltstore.Options{})}
	e := engine.New(st, engine.Options{Lease: 10 * time.Second, PollInterval: time.Hour, Logger: testkit.Logger(t)})
	got := make(chan claimResult, 1)
	go func() {
		jobs, err := e.ClaimHanded(t.Context(), []string{"default"}, 1, time.Minute)
		got <- claimResult{jobs, err}
	}()
	if res := answer(t, got); res.err != nil || len(res.jobs) != 0 {
		t.Fatalf("claim = %+v, %v; want nothing", res.jobs, res.err)
	}
	if n := st.claims.Load(); n != 1 {
		t.Errorf("the claim looked %d times; want once", n)
	}
}

// racingStore runs next once, right after a claim's look at the store and
// before the engine sees its answer, so next falls between the claim's look
// and its wait; and it holds each run update until release is closed, once
// hold is set.
type racingStore struct {
	*countingStore
	once     sync.Once
	next     func()
	hold     atomic.Bool
	updating chan struct{} // told when a held update arrives
	release  chan struct{}
}

func newRacingStore(inner engine.Store) *racingStore {
	return &racingStore{
		countingStore: &countingStore{Store: inner, features: leasing},
		next:          func() {},
		updating:      make(chan struct{}, 1),
		release:       make(chan struct{}),
	}
}

func (s *racingStore) Claim(ctx context.Context, queues []string, now, leaseUntil int64, lease string, max int) ([]store.Job, error) {
	jobs, err := s.countingStore.Claim(ctx, queues, now, leaseUntil, lease, max)
	s.once.Do(s.next)
	return jobs, err
}

func (s *racingStore) UpdateRun(ctx context.Context, u store.RunUpdate) (store.AppendResult, error) {
	if s.hold.Load() {
		s.updating <- struct{}{}
		<-s.release
	}
	return s.countingStore.UpdateRun(ctx, u)
}

// handedClaim starts a claim that takes only hand-overs, waiting up to a
// minute.
func handedClaim(t *testing.T, e *engine.Engine) <-chan claimResult {
	got := make(chan claimResult, 1)
	go func() {
		jobs, err := e.ClaimHanded(t.Context(), []string{"default"}, 1, time.Minute)
		got <- claimResult{jobs, err}
	}()
	return got
}

// A run started while a claim that takes only hand-overs had looked at the
// store but not begun to wait is not handed to it, yet the claim gets its
// job by looking again, rather than waiting out its time: whether the
// start's write was done before the claim began to wait or after.
func TestHandedClaimSeesStartBeforeItWaits(t *testing.T) {
	eachLeasingBackend(t, func(t *testing.T, inner engine.Store) {
		ctx := t.Context()
		newEngine := func(st engine.Store) *engine.Engine {
			return engine.New(st, engine.Options{Lease: 10 * time.Second, PollInterval: time.Hour, Logger: testkit.Logger(t)})
		}

		// Done between the claim's look and its wait.
		st := newRacingStore(inner)
		e := newEngine(st)
		mustDefine(t, e, "diamond", "diamond")
		var started engine.Started
		st.next = func() {
			var err error
			if started, err = e.Start(ctx, "diamond", nil, ""); err != nil {
				t.Error(err)
			}
		}
		res := answer(t, handedClaim(t, e))
		if res.err != nil || len(res.jobs) != 1 || res.jobs[0].ID != started.ID {
			t.Fatalf("claim = %+v, %v; want the job of the run started meanwhile", res.jobs, res.err)
		}

		// Looked for a waiting claim before the claim's look, written
		// once the claim waits.
		st = newRacingStore(inner)
		e = newEngine(st)
		st.hold.Store(true)
		starts := make(chan error, 1)
		go func() {
			var err error
			started, err = e.Start(ctx, "diamond", nil, "")
			starts <- err
		}()
		<-st.updating
		got := handedClaim(t, e)
		wait.For(t, 5*time.Second, time.Millisecond, "the claim to wait", func() bool { return e.Waiting() > 0 })
		close(st.release)
		if err := <-starts; err != nil {
			t.Fatal(err)
		}
		if res := answer(t, got); res.err != nil || len(res.jobs) != 1 || res.jobs[0].ID != started.ID {
			t.Fatalf("claim = %+v, %v; want the job of the run started meanwhile", res.jobs, res.err)
		}
	})
}
