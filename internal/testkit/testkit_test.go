package testkit_test

import (
	"sync"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
)

func TestClock(t *testing.T) {
	start := time.UnixMilli(1_800_000_000_000)
	c := testkit.NewClock(start)
	if !c.Now().Equal(start) {
		t.Fatalf("Now = %s, want %s", c.Now(), start)
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { c.Add(time.Second) })
	}
	wg.Wait()
	if want := start.Add(10 * time.Second); !c.Now().Equal(want) {
		t.Errorf("after ten concurrent Add(1s): %s, want %s", c.Now(), want)
	}
	c.Set(start.Add(-time.Hour))
	if want := start.Add(-time.Hour); !c.Now().Equal(want) {
		t.Errorf("after Set: %s, want %s", c.Now(), want)
	}
}

// TestBoltTakesTheClock: the store opened by Bolt honours its options, so a
// test's clock decides the ids it assigns.
func TestBoltTakesTheClock(t *testing.T) {
	c := testkit.NewClock(time.UnixMilli(1_800_000_000_123))
	s := testkit.Bolt(t, boltstore.Options{Now: c.Now, Logger: testkit.Logger(t)})
	res, err := s.Append(t.Context(), store.Context{Type: "flow", ID: "run-1"}, []event.Event{{Kind: "flow.started"}}, store.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Events[0].ID.MS; got != 1_800_000_000_123 {
		t.Errorf("id time %d, want the clock's 1800000000123", got)
	}
}
