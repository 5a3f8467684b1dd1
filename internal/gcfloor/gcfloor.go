// Package gcfloor keeps Go's garbage collector from running before the heap
// reaches a floor.
//
// Go starts a collection when the heap has grown by GOGC percent (100) over
// what the last one found live, and no earlier than at 4 MB. nqd keeps little
// live (a few megabytes until its caches fill) and allocates a lot per request,
// so with that rule it collected every 40 ms at 800 flow runs a second, and
// the collector's work came to about a sixth of its CPU. A floor trades a
// bounded amount of memory for that CPU: below it the percentage is raised so
// that the next collection starts when the heap reaches the floor; once twice
// the live heap is above the floor, the percentage the process started with
// applies unchanged. GOMEMLIMIT keeps working, since the runtime collects at
// whichever goal comes first.
//
// The runtime has no hook at the end of a collection, so the floor is
// recomputed by a cleanup attached to an object that is dropped at once: the
// runtime runs it after each collection that finds the object unreachable, and
// each run drops a new one.
package gcfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// DefaultFloor is nqd's floor unless configured: a quarter of what its state
// cache may hold by default, it cut the collections of a loaded nqd with a
// 4 MB live heap sixfold, while a few thousand idle streams (whose live heap
// soon passes half of it) keep Go's own pacing.
const DefaultFloor = 24 << 20

// maxPercent caps the raised percentage. Right after start the live heap is
// tiny, and a percentage made from it would let a heap that suddenly grows
// run far past the floor before the next recomputation.
const maxPercent = 2000

// liveMetric is the heap the last collection marked live.
const liveMetric = "/gc/heap/live:bytes"

// Percent is the GC percentage that makes the next collection start when the
// heap reaches floor bytes, given live bytes marked live by the last one and
// base, the percentage in force without a floor. It is never below base: the
// floor only ever delays a collection.
func Percent(live, floor uint64, base int) int {
	if base < 0 || live == 0 || floor <= live {
		return base
	}
	p := (float64(floor)/float64(live) - 1) * 100
	if p <= float64(base) {
		return base
	}
	return int(math.Min(math.Floor(p), maxPercent))
}

// Floor holds the collector's percentage at Percent of the live heap after
// every collection until Stop.
type Floor struct {
	floor uint64
	base  int

	mu      sync.Mutex // cleanups may run concurrently
	stopped bool
	last    int
	sample  []metrics.Sample
}

// Start keeps the heap from being collected before it reaches floor bytes, on
// top of the percentage in force now (GOGC's, 100 by default). Only one Floor
// should run in a process: each sets the process-wide percentage.
func Start(floor uint64) *Floor {
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	f := &Floor{floor: floor, base: base, last: base, sample: []metrics.Sample{{Name: liveMetric}}}
	f.adjust()
	f.arm()
	return f
}

// Stop restores the percentage in force before Start.
func (f *Floor) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	debug.SetGCPercent(f.base)
}

// sentinel is big enough not to share a tiny-allocator block with other
// objects, which would delay its cleanup until they are unreachable too.
type sentinel struct{ _ [4]uintptr }

// arm attaches the next recomputation to an object nothing refers to, so the
// next collection finds it unreachable.
func (f *Floor) arm() {
	runtime.AddCleanup(&sentinel{}, func(f *Floor) {
		if f.adjust() {
			f.arm()
		}
	}, f)
}

// adjust sets the percentage for the live heap the last collection found,
// and reports whether the floor is still running.
func (f *Floor) adjust() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return false
	}
	metrics.Read(f.sample)
	if f.sample[0].Value.Kind() != metrics.KindUint64 {
		return false // a runtime without the metric: leave Go's pacing alone
	}
	if p := Percent(f.sample[0].Value.Uint64(), f.floor, f.base); p != f.last {
		debug.SetGCPercent(p)
		f.last = p
	}
	return true
}
