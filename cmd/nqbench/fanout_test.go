package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/config"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/wiring"
)

// TestFanoutOnCluster runs the fan-out profile and its checker for a couple
// of seconds against nqd on a Redis Cluster of three primaries, its keys
// over nine shards: appends to contexts on every primary, each context
// streamed live to several SSE clients, and every client must receive every
// acknowledged event of its context once, in order.
func TestFanoutOnCluster(t *testing.T) {
	b := backendtest.Named(t, backendtest.RedisClusterShards)
	base := serveNQD(t, b.Args(t))
	// 18 contexts: with nine shards over three primaries, every shard holds
	// a couple.
	res, err := runFanout(t.Context(), env{base: base}, 200, 2*time.Second, 18, 4, 8)
	if err != nil {
		t.Fatal(err)
	}
	if res.Appends.Errors > 0 || res.Expected == 0 {
		t.Fatalf("%d appends acknowledged, %d failed: the checker had nothing to check", res.Appends.OK, res.Appends.Errors)
	}
	t.Logf("%d appends, %d deliveries to %d×%d clients, none missing, duplicated or out of order; append → receive p99 %.1f ms",
		res.Appends.OK, res.Deliveries, res.Contexts, res.Subscribers, res.Delivery.P99ms)
}

// serveNQD runs nqd's real wiring on 127.0.0.1:0 with the store args until
// the test ends, without the per-client limits (one client offers all the
// load, as startNQD sets them), and returns its base URL.
func serveNQD(t *testing.T, storeArgs []string) string {
	t.Helper()
	args := append([]string{"-addr", "127.0.0.1:0", "-rate-per-addr", "0", "-rate-per-token", "0", "-max-streams-per-client", "0", "-log-level", "warn"}, storeArgs...)
	cfg, err := config.Load(args, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	app, err := wiring.New(context.Background(), cfg, testkit.Logger(t).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Serve() }()
	t.Cleanup(func() {
		if err := app.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-done
		if err := app.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return "http://" + app.Addr()
}
