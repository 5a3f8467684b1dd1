package storetest

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// benchEvent is about 256 bytes stored, the event size nqd's benchmarks use.
func benchEvent(c store.Context, n int) event.Event {
	return event.Event{
		Kind: "step.completed", Subject: c.ID, RunID: c.ID, FlowName: "bench", Step: "charge",
		Data: json.RawMessage(fmt.Sprintf(`{"n":%d,"result":"%s"}`, n, strings.Repeat("x", 100))),
		Meta: json.RawMessage(`{"attempt":1,"duration":12}`),
	}
}

// RunBenchmarks measures the operations the service leans on: single and
// batched appends, reading a 1000-event stream whole and its newest 100 (a
// backfill), and appends from 8 goroutines
// per CPU, each to its own context. newStore is called once per benchmark and
// follows the same rules as a NewStore given to RunAll.
func RunBenchmarks(b *testing.B, newStore func(b *testing.B) store.Store) {
	b.Run("AppendSingle", func(b *testing.B) {
		s := newStore(b)
		c := store.Context{Type: "flow", ID: "bench-single"}
		n := 0
		for b.Loop() {
			benchAppend(b, s, c, []event.Event{benchEvent(c, n)})
			n++
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
	})

	b.Run("AppendBatch10", func(b *testing.B) {
		s := newStore(b)
		c := store.Context{Type: "flow", ID: "bench-batch"}
		batch := make([]event.Event, 10)
		n := 0
		for b.Loop() {
			for i := range batch {
				batch[i] = benchEvent(c, n)
				n++
			}
			benchAppend(b, s, c, batch)
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
	})

	b.Run("Range1000", func(b *testing.B) {
		s := newStore(b)
		c := store.Context{Type: "flow", ID: "bench-range"}
		batch := make([]event.Event, 100)
		for n := range 10 {
			for i := range batch {
				batch[i] = benchEvent(c, n*100+i)
			}
			benchAppend(b, s, c, batch)
		}
		for b.Loop() {
			got, err := s.Range(b.Context(), c, store.RangeQuery{})
			if err != nil {
				b.Fatal(err)
			}
			if len(got) != 1000 {
				b.Fatalf("Range returned %d events, want 1000", len(got))
			}
		}
	})

	b.Run("RangeNewest100", func(b *testing.B) {
		s := newStore(b)
		c := store.Context{Type: "flow", ID: "bench-newest"}
		batch := make([]event.Event, 100)
		for n := range 10 {
			for i := range batch {
				batch[i] = benchEvent(c, n*100+i)
			}
			benchAppend(b, s, c, batch)
		}
		for b.Loop() {
			got, err := s.Range(b.Context(), c, store.RangeQuery{Reverse: true, Limit: 100})
			if err != nil {
				b.Fatal(err)
			}
			if len(got) != 100 {
				b.Fatalf("Range returned %d events, want 100", len(got))
			}
		}
	})

	b.Run("AppendParallel", func(b *testing.B) {
		s := newStore(b)
		var workers, total atomic.Int64
		// Many more writers than cores, as with concurrent HTTP clients.
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			c := store.Context{Type: "flow", ID: fmt.Sprintf("bench-par-%d", workers.Add(1))}
			n := 0
			for pb.Next() {
				// Fatal may not be called off the benchmark's goroutine.
				if _, err := s.Append(b.Context(), c, []event.Event{benchEvent(c, n)}, store.AppendOptions{}); err != nil {
					b.Error(err)
					return
				}
				n++
			}
			total.Add(int64(n))
		})
		b.ReportMetric(float64(total.Load())/b.Elapsed().Seconds(), "events/s")
	})
}

func benchAppend(b *testing.B, s store.Store, c store.Context, batch []event.Event) {
	b.Helper()
	if _, err := s.Append(b.Context(), c, batch, store.AppendOptions{}); err != nil {
		b.Fatal(err)
	}
}
