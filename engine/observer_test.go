package engine_test

import (
	"sync"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
)

// recorder is an engine.Observer that keeps what it is told.
type recorder struct {
	mu      sync.Mutex
	kinds   []string // events of committed updates
	claimed []int    // attempts handed out
	expired []string // queues of expired leases
	late    map[string]time.Duration
}

func (r *recorder) Committed(u store.RunUpdate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range u.Events {
		r.kinds = append(r.kinds, ev.Kind)
	}
}

func (r *recorder) Claimed(j store.Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.claimed = append(r.claimed, j.Attempt)
}

func (r *recorder) LeaseExpired(j store.Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expired = append(r.expired, j.Queue)
}

func (r *recorder) TimerDue(t store.Timer, late time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.late[t.Kind] = late
}

// TestObserver: the observer hears of the start, each attempt handed out,
// a lease that ran out, the failure's retry, and the retry timer with how
// late the engine took it.
func TestObserver(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		ctx := t.Context()
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		rec := &recorder{late: map[string]time.Duration{}}
		e := engine.New(st, engine.Options{Now: c.Now, Lease: 10 * time.Second, Observer: rec, Logger: testkit.Logger(t)})
		mustDefine(t, e, "example-flow", "example-flow")
		if _, err := e.Start(ctx, "example-flow", nil, ""); err != nil {
			t.Fatal(err)
		}
		if first, err := e.Claim(ctx, []string{"default"}, 1, 0); err != nil || len(first) != 1 {
			t.Fatal(first, err)
		}
		c.Add(11 * time.Second) // the worker died: its lease runs out
		again, err := e.Claim(ctx, []string{"default"}, 1, 0)
		if err != nil || len(again) != 1 {
			t.Fatal(again, err)
		}
		if err := e.Fail(ctx, store.JobAck{Queue: "default", ID: again[0].ID, Lease: again[0].Lease}, "flaky", nil); err != nil {
			t.Fatal(err)
		}
		c.Add(time.Minute)
		if err := e.Tick(ctx); err != nil {
			t.Fatal(err)
		}

		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.claimed) != 2 || rec.claimed[0] != 1 || rec.claimed[1] != 2 {
			t.Errorf("claimed attempts %v, want [1 2]", rec.claimed)
		}
		if len(rec.expired) != 1 || rec.expired[0] != "default" {
			t.Errorf("expired leases %v, want one on default", rec.expired)
		}
		want := []string{"flow.started", "step.failed", "step.retry"}
		if len(rec.kinds) != len(want) {
			t.Fatalf("committed events %v, want %v", rec.kinds, want)
		}
		for i := range want {
			if rec.kinds[i] != want[i] {
				t.Errorf("committed events %v, want %v", rec.kinds, want)
			}
		}
		// Due a backoff (at most a second) after the failure, taken a
		// minute after it.
		if late, ok := rec.late["retry"]; !ok || late < 59*time.Second || late >= time.Minute {
			t.Errorf("retry timer late by %v (seen %v), want between 59s and 60s", late, ok)
		}
	})
}
