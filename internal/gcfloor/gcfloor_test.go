package gcfloor_test

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/internal/gcfloor"
	"github.com/nqd-dev/nqd/internal/wait"
)

const mib = 1 << 20

func TestPercent(t *testing.T) {
	cases := []struct {
		name        string
		live, floor uint64
		base, want  int
	}{
		{"small heap reaches the floor", 4 * mib, 32 * mib, 100, 700},
		{"heap whose double passes the floor", 20 * mib, 32 * mib, 100, 100},
		{"heap above the floor", 64 * mib, 32 * mib, 100, 100},
		{"a higher GOGC is kept", 4 * mib, 16 * mib, 400, 400},
		{"a higher GOGC below the floor", 4 * mib, 32 * mib, 400, 700},
		{"nothing live yet", 0, 32 * mib, 100, 100},
		{"tiny heap, capped", 1024, 32 * mib, 100, 2000},
		{"collection off stays off", 4 * mib, 32 * mib, -1, -1},
	}
	for _, c := range cases {
		if got := gcfloor.Percent(c.live, c.floor, c.base); got != c.want {
			t.Errorf("%s: Percent(%d, %d, %d) = %d, want %d", c.name, c.live, c.floor, c.base, got, c.want)
		}
	}
}

func gogc() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestFloorFollowsTheLiveHeap starts a floor far above this test's live
// heap, then makes the live heap bigger than the floor: after a collection
// each time, the percentage must first rise and then fall back to Go's.
func TestFloorFollowsTheLiveHeap(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	f := gcfloor.Start(48 * mib)
	collect := func(what string, ok func() bool) {
		t.Helper()
		// Each collection runs the floor's cleanup afterwards; collect until
		// it has, or the deadline passes.
		wait.For(t, 10*time.Second, 10*time.Millisecond, what, func() bool {
			runtime.GC()
			return ok()
		})
	}
	collect("the percentage to rise above 100", func() bool { return gogc() > 100 })

	held := make([]byte, 64*mib)
	for i := range held {
		held[i] = 1 // live, not merely reserved
	}
	collect("the percentage to fall back to 100 once the heap passed the floor", func() bool { return gogc() == 100 })
	runtime.KeepAlive(held)

	f.Stop()
	if got := gogc(); got != 100 {
		t.Fatalf("after Stop the percentage is %d, want 100", got)
	}
}
