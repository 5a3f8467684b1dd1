package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/gcfloor"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
	"github.com/nqd-dev/nqd/store/redisstore"
)

// benchEvent is a typical step record of about 256 bytes.
const benchEvent = `{"kind":"step.completed","flow":"6f1c2a9e-4b7d-4e21-9a3c-58d0b1e7f4aa","flowName":"resize-images",` +
	`"step":"thumbnail","attempt":1,"data":{"result":{"width":320,"height":240,"bytes":18734,"key":"thumbs/6f1c2a9e.jpg"}},` +
	`"meta":{"attempt":1,"duration":42}}`

// benchParallelism is the clients per GOMAXPROCS of each run: few clients
// show the latency of one request, many show throughput.
var benchParallelism = []int{1, 32}

func BenchmarkAppendHTTP(b *testing.B) {
	// As cmd/server runs nqd: no collection below the default heap floor.
	b.Cleanup(gcfloor.Start(gcfloor.DefaultFloor).Stop)
	b.Run("bolt", func(b *testing.B) {
		st := bolttest.Open(b, boltstore.Options{Logger: zerolog.Nop()})
		benchAppendClients(b, st)
	})
	b.Run("redis", func(b *testing.B) {
		// One connection per client, so that the pool is not what is measured.
		client := redis.NewClient(&redis.Options{Addr: redistest.Addr(b), PoolSize: slices.Max(benchParallelism) * runtime.GOMAXPROCS(0)})
		b.Cleanup(func() { _ = client.Close() })
		st, err := redisstore.New(client, redisstore.Options{Prefix: redistest.Prefix(b), Logger: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close() })
		benchAppendClients(b, st)
	})
	// The API's own cost: a store that assigns ids and keeps nothing.
	b.Run("discard", func(b *testing.B) {
		benchAppendClients(b, discardStore{})
	})
}

// discardStore accepts every append and stores nothing.
type discardStore struct{ handlers.Store }

func (discardStore) Append(_ context.Context, _ store.Context, evs []event.Event, _ store.AppendOptions) (store.AppendResult, error) {
	for i := range evs {
		evs[i].ID = event.ID{MS: 1764106747116, Seq: uint64(i)}
	}
	return store.AppendResult{Events: evs}, nil
}

func benchAppendClients(b *testing.B, st handlers.Store) {
	for _, p := range benchParallelism {
		b.Run(fmt.Sprintf("clients=%d", p*runtime.GOMAXPROCS(0)), func(b *testing.B) {
			benchAppend(b, st, p)
		})
	}
}

// benchAppend posts benchEvent from parallelism×GOMAXPROCS clients, each to
// its own run, through the whole router, and reports throughput and the
// latency percentiles (the target: p99 ≤ 5 ms at 5,000 appends/s). The access
// log is off: it measures the API and the store, not the log sink.
func benchAppend(b *testing.B, st handlers.Store, parallelism int) {
	h := handlers.New(handlers.Deps{Store: st, Log: zerolog.Nop()}).Routes()
	var (
		clients atomic.Int64
		mu      sync.Mutex
		lats    []time.Duration
	)
	b.SetBytes(int64(len(benchEvent)))
	b.ReportAllocs()
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		target := fmt.Sprintf("/api/_events/flow/run-%d", clients.Add(1))
		var mine []time.Duration
		for pb.Next() {
			r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(benchEvent))
			r.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			start := time.Now()
			h.ServeHTTP(rec, r)
			mine = append(mine, time.Since(start))
			if rec.Code != http.StatusCreated {
				b.Errorf("status %d: %s", rec.Code, rec.Body)
				return
			}
		}
		mu.Lock()
		lats = append(lats, mine...)
		mu.Unlock()
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
	slices.Sort(lats)
	if len(lats) > 0 {
		b.ReportMetric(float64(lats[len(lats)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "p99-µs")
	}
}
