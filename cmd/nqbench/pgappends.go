package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// runPGAppends offers rate appends/s for d to nqd on PostgreSQL over HTTP,
// then the same rate of the bare write to the same server from the same
// process with the same concurrency: an INSERT into a scratch table and a
// pg_notify, sent as one batch so they cost one round trip, as nqd's append
// does.
func runPGAppends(ctx context.Context, e env, pgURL string, rate float64, d time.Duration, conns, contexts int) (appendsResult, error) {
	res := appendsResult{Concurrency: conns, Contexts: contexts}
	// The warm-up opens nqd's pool connections and fills PostgreSQL's
	// caches, as a server that has run a while has done long ago.
	nqd, r, _ := measureNQDAppends(ctx, e, "pg-appends", rate, d, conns, contexts)
	res.NQD = nqd

	cfg, err := pgxpool.ParseConfig(pgURL)
	if err != nil {
		return res, err
	}
	cfg.MaxConns, cfg.MinConns = int32(conns), int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	// The scratch table carries what nqd's events table needs at least: the
	// context, a sequence and the body; it is dropped with the server.
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS nqbench_events (
		id bigserial PRIMARY KEY, ctx text NOT NULL, at timestamptz NOT NULL DEFAULT now(), body jsonb NOT NULL)`); err != nil {
		return res, err
	}
	record := `{"kind":"log","data":{"pad":"` + pad + `"}}`
	baseline := func(ctx context.Context, seq int64, _ time.Time) error {
		key := "bench:a" + strconv.FormatInt(seq%int64(contexts), 10)
		var b pgx.Batch
		b.Queue(`INSERT INTO nqbench_events (ctx, body) VALUES ($1, $2)`, key, record)
		b.Queue(`SELECT pg_notify('nqbench', $1)`, key)
		// A batch outside a transaction runs as one implicit transaction, so
		// the notification is sent at its commit, as nqd's is.
		return pool.SendBatch(ctx, &b).Close()
	}
	openLoop(ctx, "pg-appends baseline warm-up", rate, warmUp, conns, baseline)
	cpu := meterCPU(e)
	b := openLoop(ctx, "pg-appends baseline", rate, d, conns, baseline)
	res.Baseline = row("PostgreSQL INSERT+NOTIFY", rate, b)
	res.Baseline.CPU = cpu.String()
	res.P50Ratio = safeDiv(res.NQD.P50ms, res.Baseline.P50ms)
	res.P99Ratio = safeDiv(res.NQD.P99ms, res.Baseline.P99ms)
	res.ThroughputRatio = safeDiv(res.NQD.Achieved, res.Baseline.Achieved)
	if r.Errors > 0 || b.Errors > 0 {
		return res, fmt.Errorf("%d of %d appends and %d of %d baseline writes failed", r.Errors, r.Sent, b.Errors, b.Sent)
	}
	return res, nil
}
