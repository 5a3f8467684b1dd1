package redisstore_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/redisstore"
)

// event256 stores as about 256 bytes, the event size nqd's benchmarks use.
func event256(c store.Context, n int) event.Event {
	return event.Event{
		Kind: "step.completed", Subject: c.ID, RunID: c.ID, FlowName: "bench", Step: "charge",
		Data: json.RawMessage(fmt.Sprintf(`{"n":%d,"result":"%s"}`, n, strings.Repeat("x", 100))),
		Meta: json.RawMessage(`{"attempt":1,"duration":12}`),
	}
}

// BenchmarkAppend measures parallel single-event appends, each to its
// goroutine's own context, next to a plain XADD of the same body at the same
// concurrency on the same Redis: the ratio of the two is the cost of the
// script (publish, index check, validation and encoding), which absolute
// numbers on a shared machine hide.
func BenchmarkAppend(b *testing.B) {
	b.Run("Store", func(b *testing.B) {
		s, _ := newTestStore(b, redisstore.Options{})
		var workers atomic.Int64
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			c := store.Context{Type: "flow", ID: fmt.Sprintf("bench-%d", workers.Add(1))}
			n := 0
			for pb.Next() {
				if _, err := s.Append(b.Context(), c, []event.Event{event256(c, n)}, store.AppendOptions{}); err != nil {
					b.Error(err)
					return
				}
				n++
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("XADDBaseline", func(b *testing.B) {
		prefix := redistest.Prefix(b)
		client := redis.NewClient(&redis.Options{Addr: redistest.Addr(b)})
		b.Cleanup(func() { _ = client.Close() })
		var workers atomic.Int64
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			c := store.Context{Type: "flow", ID: fmt.Sprintf("bench-%d", workers.Add(1))}
			body, _ := event256(c, 0).MarshalBody()
			key := prefix + ":flow:" + c.ID
			for pb.Next() {
				if err := client.XAdd(b.Context(), &redis.XAddArgs{Stream: key, Values: []any{"e", body}}).Err(); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
}
