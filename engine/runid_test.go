package engine_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/internal/testkit"
)

// Run ids sort by when the run started, so a store's keys and indexes of
// runs started close together share their pages.
func TestRunIDsFollowStartOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		e := newEngine(t, st, testkit.NewClock(time.UnixMilli(1_700_000_000_000)))
		mustDefine(t, e, "example-flow", "example-flow")
		prev := ""
		for range 50 {
			started, err := e.Start(t.Context(), "example-flow", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			id, err := uuid.Parse(started.FlowID)
			if err != nil || id.Version() != 7 || id.Variant() != uuid.RFC4122 {
				t.Fatalf("run id %q: not a version 7 UUID (%v)", started.FlowID, err)
			}
			if started.FlowID <= prev {
				t.Fatalf("run id %q started after %q sorts before it", started.FlowID, prev)
			}
			prev = started.FlowID
		}
	})
}
