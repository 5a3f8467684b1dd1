package bolttest_test

import (
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
)

// TestOpenTakesTheClock: the store Open opens honours its options, so a
// test's clock decides the ids it assigns.
func TestOpenTakesTheClock(t *testing.T) {
	c := testkit.NewClock(time.UnixMilli(1_800_000_000_123))
	s := bolttest.Open(t, boltstore.Options{Now: c.Now, Logger: testkit.Logger(t)})
	res, err := s.Append(t.Context(), store.Context{Type: "flow", ID: "run-1"}, []event.Event{{Kind: "flow.started"}}, store.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Events[0].ID.MS; got != 1_800_000_000_123 {
		t.Errorf("id time %d, want the clock's 1800000000123", got)
	}
}
