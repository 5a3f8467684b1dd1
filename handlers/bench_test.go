package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/redisstore"
)

// benchEvent is a typical step record of about 256 bytes.
const benchEvent = `{"kind":"step.completed","flow":"6f1c2a9e-4b7d-4e21-9a3c-58d0b1e7f4aa","flowName":"resize-images",` +
	`"step":"thumbnail","attempt":1,"data":{"result":{"width":320,"height":240,"bytes":18734,"key":"thumbs/6f1c2a9e.jpg"}},` +
	`"meta":{"attempt":1,"duration":42}}`

// benchClients is the number of concurrent clients per GOMAXPROCS.
const benchClients = 32

func BenchmarkAppendHTTP(b *testing.B) {
	b.Run("bolt", func(b *testing.B) {
		st, err := boltstore.Open(filepath.Join(b.TempDir(), "nqd.db"), boltstore.Options{Logger: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close() })
		benchAppend(b, st)
	})
	b.Run("redis", func(b *testing.B) {
		// One connection per client, so that the pool is not what is measured.
		client := redis.NewClient(&redis.Options{Addr: redistest.Addr(b), PoolSize: benchClients * runtime.GOMAXPROCS(0)})
		b.Cleanup(func() { _ = client.Close() })
		st, err := redisstore.New(client, redisstore.Options{Prefix: redistest.Prefix(b), Logger: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close() })
		benchAppend(b, st)
	})
	// The API's own cost: a store that assigns ids and keeps nothing.
	b.Run("discard", func(b *testing.B) {
		benchAppend(b, discardStore{})
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

// benchAppend posts benchEvent from benchClients×GOMAXPROCS clients, each to its own run,
// through the whole router. The access log is off: it measures the API and
// the store, not the log sink.
func benchAppend(b *testing.B, st handlers.Store) {
	h := handlers.New(handlers.Deps{Store: st, Log: zerolog.Nop()}).Routes()
	var clients atomic.Int64
	b.SetBytes(int64(len(benchEvent)))
	b.ReportAllocs()
	// Many clients at once, as behind a real server: the embedded store
	// commits concurrent appends together.
	b.SetParallelism(benchClients)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		target := fmt.Sprintf("/api/_events/flow/run-%d", clients.Add(1))
		for pb.Next() {
			r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(benchEvent))
			r.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != http.StatusCreated {
				b.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
}
