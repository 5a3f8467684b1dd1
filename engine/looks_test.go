package engine_test

import (
	"testing"
	"time"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/internal/wait"
)

// A claim that found nothing is not repeated at the store within the poll
// interval while nothing was enqueued on the instance: another instance's
// job is found once the interval has passed, and a job enqueued here at
// once.
func TestClaimSparesRepeatedEmptyLooks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, inner engine.Store) {
		ctx := t.Context()
		st := &countingStore{Store: inner}
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := engine.New(st, engine.Options{Now: c.Now, Lease: 10 * time.Second, PollInterval: time.Second, Logger: testkit.Logger(t)})
		other := engine.New(inner, engine.Options{Now: c.Now, Lease: 10 * time.Second, Logger: testkit.Logger(t)})
		mustDefine(t, e, "diamond", "diamond")
		claim := func(want string) {
			t.Helper()
			jobs, err := e.Claim(ctx, []string{"default"}, 4, 0)
			if err != nil || len(jobs) > 1 || (len(jobs) == 1) != (want != "") || (want != "" && jobs[0].ID != want) {
				t.Fatalf("claim = %+v, %v; want %q", jobs, err, want)
			}
		}
		looks := func() int64 { return st.claims.Load() }

		claim("")
		before := looks()
		claim("")
		if n := looks() - before; n != 0 {
			t.Errorf("a claim right after one that found nothing asked the store %d times; want none", n)
		}

		elsewhere, err := other.Start(ctx, "diamond", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		c.Add(999 * time.Millisecond)
		claim("")
		c.Add(time.Millisecond)
		claim(elsewhere.ID)

		claim("")
		here, err := e.Start(ctx, "diamond", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		claim(here.ID)
	})
}

// A long-polling claim that skipped its look still finds another
// instance's job at its next look, a poll interval after the last one.
func TestWaitingClaimFindsJobsElsewhere(t *testing.T) {
	forEachBackend(t, func(t *testing.T, inner engine.Store) {
		ctx := t.Context()
		e := engine.New(inner, engine.Options{Lease: 10 * time.Second, PollInterval: 50 * time.Millisecond, Logger: testkit.Logger(t)})
		other := engine.New(inner, engine.Options{Lease: 10 * time.Second, Logger: testkit.Logger(t)})
		mustDefine(t, e, "diamond", "diamond")
		if jobs, err := e.Claim(ctx, []string{"default"}, 1, 0); err != nil || len(jobs) != 0 {
			t.Fatalf("claim = %+v, %v; want nothing", jobs, err)
		}
		got := make(chan claimResult, 1)
		go func() {
			jobs, err := e.Claim(ctx, []string{"default"}, 1, 10*time.Second)
			got <- claimResult{jobs, err}
		}()
		started, err := other.Start(ctx, "diamond", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if res := answer(t, got); res.err != nil || len(res.jobs) != 1 || res.jobs[0].ID != started.ID {
			t.Fatalf("claim = %+v, %v; want the other instance's job", res.jobs, res.err)
		}
	})
}

// A claim that takes only hand-overs does not look at the store again while
// it waits, not even when woken: a job enqueued elsewhere is not for it, and
// it answers the one a start here hands it.
func TestClaimHandedTakesOnlyHandOvers(t *testing.T) {
	eachLeasingBackend(t, func(t *testing.T, inner engine.Store) {
		ctx := t.Context()
		st, e := newWaitingEngine(t, inner)
		other := engine.New(inner, engine.Options{Lease: 10 * time.Second, Logger: testkit.Logger(t)})
		mustDefine(t, e, "diamond", "diamond")
		got := make(chan claimResult, 1)
		go func() {
			jobs, err := e.ClaimHanded(ctx, []string{"default"}, 1, 10*time.Second)
			got <- claimResult{jobs, err}
		}()
		wait.For(t, 5*time.Second, time.Millisecond, "the claim to wait", func() bool { return e.Waiting() > 0 })
		looks := st.claims.Load()
		if _, err := other.Start(ctx, "diamond", nil, ""); err != nil {
			t.Fatal(err)
		}
		// Resuming a queue wakes the claims waiting here.
		if err := e.SetQueuePaused(ctx, "default", false); err != nil {
			t.Fatal(err)
		}
		here, err := e.Start(ctx, "diamond", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if res := answer(t, got); res.err != nil || len(res.jobs) != 1 || res.jobs[0].RunID != here.FlowID {
			t.Fatalf("claim = %+v, %v; want the job started here", res.jobs, res.err)
		}
		if n := st.claims.Load() - looks; n != 0 {
			t.Errorf("the waiting claim looked at the store %d times; want none", n)
		}
	})
}
