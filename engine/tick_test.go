package engine_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
)

// TestRunFiresTimersOnItsTick runs the engine's own loop on a synctest
// bubble's clock, with no hand on it: a time await is not resumed a
// millisecond before it is due, is resumed within one tick after, and only
// once. (The embedded store only: a bubble cannot hold a Redis connection.)
func TestRunFiresTimersOnItsTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay, tick = time.Minute, 250 * time.Millisecond
		st := bolttest.Open(t, boltstore.Options{})
		e := engine.New(st, engine.Options{Interval: tick, Logger: testkit.Logger(t)})
		awaitFlow(t, e, "later", &flows.Await{Type: "time", Delay: delay.Milliseconds()})
		s, err := e.Start(t.Context(), "later", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		runEntry(t, e) // registers the await, due a delay from now
		due := time.Now().Add(delay)
		run := store.Context{Type: "flow", ID: s.FlowID}

		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- e.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil && ctx.Err() == nil {
				t.Errorf("Run: %v", err)
			}
		}()

		time.Sleep(time.Until(due) - time.Millisecond)
		synctest.Wait()
		if got := countKind(t, st, run, "step.resumed"); got != 0 {
			t.Fatalf("resumed %d times a millisecond before it was due", got)
		}
		time.Sleep(time.Millisecond + tick)
		synctest.Wait()
		if got := countKind(t, st, run, "step.resumed"); got != 1 {
			t.Fatalf("step.resumed %d times one tick after it was due, want 1", got)
		}
		time.Sleep(delay)
		synctest.Wait()
		if got := countKind(t, st, run, "step.resumed"); got != 1 {
			t.Errorf("step.resumed %d times a minute later, want still 1", got)
		}
	})
}
