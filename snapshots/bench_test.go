package snapshots_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/reducers"
	"github.com/nqd-dev/nqd/snapshots"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
	"github.com/nqd-dev/nqd/store/redisstore"
)

// runEvents is a flow run of n events shaped like a long real one: ten steps
// that start, log, set state, emit and complete, logs being most of it.
func runEvents(c store.Context, n int) []event.Event {
	evs := make([]event.Event, 0, n)
	evs = append(evs, event.Event{Kind: "flow.started", Subject: c.ID, RunID: c.ID, FlowName: "bench",
		Data: json.RawMessage(`{"input":{"dataset":"s3://bucket/key","epochs":10}}`)})
	for i := 1; len(evs) < n; i++ {
		step := fmt.Sprintf("step-%d", i%10)
		var e event.Event
		switch i % 10 {
		case 0:
			e = event.Event{Kind: "step.started", Step: step}
		case 1, 2, 3, 4, 5:
			e = event.Event{Kind: "log", Step: step, Data: json.RawMessage(fmt.Sprintf(`{"level":"info","msg":"processed batch %d of the input"}`, i))}
		case 6:
			e = event.Event{Kind: "state.set", Step: step, Data: json.RawMessage(fmt.Sprintf(`{"key":"k%d","value":{"n":%d}}`, i%40, i))}
		case 7:
			e = event.Event{Kind: "emit", Step: step, Data: json.RawMessage(fmt.Sprintf(`{"event":"batch.done","payload":{"n":%d}}`, i))}
		case 8:
			e = event.Event{Kind: "log", Step: step, Data: json.RawMessage(`{"level":"debug","msg":"checkpoint"}`)}
		case 9:
			e = event.Event{Kind: "step.completed", Step: step, Data: json.RawMessage(`{"result":{"ok":true}}`)}
		}
		e.Subject, e.RunID = c.ID, c.ID
		evs = append(evs, e)
	}
	return evs
}

func benchBolt(b *testing.B) store.Store {
	b.Helper()
	return bolttest.Open(b, boltstore.Options{})
}

func benchRedis(b *testing.B) store.Store {
	b.Helper()
	st, err := redisstore.New(redistest.Client(b), redisstore.Options{Prefix: redistest.Prefix(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return st
}

func fill(b *testing.B, st store.Store, c store.Context, evs []event.Event) {
	b.Helper()
	for page := range slices.Chunk(evs, 500) {
		if _, err := st.Append(b.Context(), c, page, store.AppendOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFold is the reducers' fold throughput on a stream already read.
func BenchmarkFold(b *testing.B) {
	c := store.Context{Type: "flow", ID: "run"}
	evs := runEvents(c, 10_000)
	for i := range evs {
		evs[i].ID = event.ID{MS: 1_700_000_000_000 + uint64(i)}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reducers.Fold(reducers.For("flow"), evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(evs)*b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkState10k reads the state of a 10,000-event run: from the cache
// (hit), cold from the stream alone, and cold from a checkpoint plus its tail,
// on both stores. Each reports p50 and p99 of single reads.
func BenchmarkState10k(b *testing.B) {
	for _, backend := range []struct {
		name string
		open func(*testing.B) store.Store
	}{{"bolt", benchBolt}, {"redis", benchRedis}} {
		b.Run(backend.name, func(b *testing.B) {
			st := backend.open(b)
			c := store.Context{Type: "flow", ID: "run-10k"}
			fill(b, st, c, runEvents(c, 10_000))
			log := zerolog.Nop()

			b.Run("hit", func(b *testing.B) {
				cache := snapshots.New(st, snapshots.Options{CheckpointEvery: -1, Logger: log})
				defer cache.Close()
				mustStateB(b, cache, c)
				measure(b, func() { mustStateB(b, cache, c) })
			})
			b.Run("cold", func(b *testing.B) {
				measure(b, func() {
					cache := snapshots.New(st, snapshots.Options{CheckpointEvery: -1, Logger: log})
					mustStateB(b, cache, c)
					_ = cache.Close()
				})
			})
			b.Run("cold_checkpoint", func(b *testing.B) {
				cp := st.(store.Checkpointer)
				writer := snapshots.New(st, snapshots.Options{Checkpoints: cp, CheckpointEvery: 9_000, Logger: log})
				mustStateB(b, writer, c)
				_ = writer.Close()
				if writer.Stats().CheckpointsWritten == 0 {
					b.Fatal("no checkpoint written")
				}
				measure(b, func() {
					cache := snapshots.New(st, snapshots.Options{Checkpoints: cp, CheckpointEvery: snapshots.DefaultCheckpointEvery, Logger: log})
					mustStateB(b, cache, c)
					_ = cache.Close()
				})
			})
		})
	}
}

func mustStateB(b *testing.B, cache *snapshots.Cache, c store.Context) {
	if _, err := cache.State(b.Context(), c); err != nil {
		b.Fatal(err)
	}
}

// measure times each call of f and reports the percentiles.
func measure(b *testing.B, f func()) {
	b.Helper()
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		f()
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkMemory1000 caches 1,000 runs of 500 events each and reports the
// heap they hold and the cache's own estimate of it (the bound: 1,000
// contexts under 100 MB).
func BenchmarkMemory1000(b *testing.B) {
	st := benchBolt(b)
	var ctxs []store.Context
	for i := range 1000 {
		c := store.Context{Type: "flow", ID: fmt.Sprintf("run-%d", i)}
		fill(b, st, c, runEvents(c, 500))
		ctxs = append(ctxs, c)
	}
	for b.Loop() {
		before := heap()
		cache := snapshots.New(st, snapshots.Options{CheckpointEvery: -1, Logger: zerolog.Nop()})
		for _, c := range ctxs {
			mustStateB(b, cache, c)
		}
		held := heap() - before
		s := cache.Stats()
		if s.Entries != len(ctxs) {
			b.Fatalf("%d entries cached, want %d", s.Entries, len(ctxs))
		}
		b.ReportMetric(float64(held)/(1<<20), "heap-MB")
		b.ReportMetric(float64(s.Bytes)/(1<<20), "estimate-MB")
		_ = cache.Close()
		runtime.KeepAlive(cache)
	}
}

func heap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
