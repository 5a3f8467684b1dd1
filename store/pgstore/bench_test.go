package pgstore_test

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/pgtest"
)

// BenchmarkRawInsertNotify is the baseline for BenchmarkStore's appends: the
// same events written without nqd, each an INSERT of its record and a
// pg_notify sent together in one round trip (one implicit transaction), with
// the same concurrency. The ratio of the two is what nqd's append costs on
// top of PostgreSQL's own work.
func BenchmarkRawInsertNotify(b *testing.B) {
	url := pgtest.URL(b)
	pool, err := pgxpool.New(b.Context(), url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if _, err := pool.Exec(b.Context(), `CREATE TABLE raw_events (ctx text, n bigint, body bytea, PRIMARY KEY (ctx, n))`); err != nil {
		b.Fatal(err)
	}
	body := func(n int) []byte {
		raw, err := event.Event{Kind: "step.completed", Subject: "bench", Data: json.RawMessage(fmt.Sprintf(`{"n":%d,"pad":"0123456789abcdef0123456789abcdef"}`, n))}.MarshalBody()
		if err != nil {
			b.Fatal(err)
		}
		return raw
	}
	// Every write gets a number of its own: a benchmark function runs
	// several times on the one table.
	var seq atomic.Int64
	write := func(ctx string) error {
		n := int(seq.Add(1))
		batch := &pgx.Batch{}
		batch.Queue(`INSERT INTO raw_events (ctx, n, body) VALUES ($1, $2, $3)`, ctx, n, body(n))
		batch.Queue(`SELECT pg_notify('raw_events', $1)`, fmt.Sprintf("%s %d", ctx, n))
		return pool.SendBatch(b.Context(), batch).Close()
	}

	b.Run("Single", func(b *testing.B) {
		n := 0
		for b.Loop() {
			if err := write("single"); err != nil {
				b.Fatal(err)
			}
			n++
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("Parallel", func(b *testing.B) {
		var workers, total atomic.Int64
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			ctx := fmt.Sprintf("par-%d", workers.Add(1)%8)
			n := 0
			for pb.Next() {
				if err := write(ctx); err != nil {
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
