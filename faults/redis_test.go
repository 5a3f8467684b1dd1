package faults

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/config"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/wiring"
)

// startApp runs nqd in this process on a free loopback port over the Redis
// at addr, and returns its base URL.
func startApp(t *testing.T, redisAddr string) string {
	t.Helper()
	return startAppOn(t, "-redis-url", "redis://"+redisAddr+"/0")
}

// startAppOn runs the real wiring on the store that storeArgs select.
func startAppOn(t *testing.T, storeArgs ...string) string {
	t.Helper()
	cfg, err := config.Load(append([]string{
		"-addr", "127.0.0.1:0",
		"-sse-heartbeat", "1s",
	}, storeArgs...), func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// Warnings are expected by the dozen while Redis is down.
	log := testkit.Logger(t).Level(zerolog.ErrorLevel)
	app, err := wiring.New(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- app.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		if err := app.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-served
		_ = app.Close()
	})
	return "http://" + app.Addr()
}

// scrapeValue returns the value of one series line of /metrics, "" when
// absent.
func scrapeValue(t *testing.T, base, series string) string {
	t.Helper()
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			return v
		}
	}
	return ""
}

// TestRedisRestart kills Redis (AOF, fsync always) during appends and
// streaming and starts it again: appends in the outage answer 503 with
// Retry-After and none is half applied, no acknowledged event is lost, and a
// client that resumes by Last-Event-ID receives every event once, in order.
func TestRedisRestart(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AOF: true})
	base := startApp(t, srv.Addr)
	ctxURL := base + "/api/_events/flow/restart"

	fctx, stopFollowers := context.WithCancel(context.Background())
	defer stopFollowers()
	followers := []*follower{follow(fctx, ctxURL+"/stream"), follow(fctx, ctxURL+"/stream")}
	a := newAppender(base, "flow", "restart")
	go a.run()

	eventually(t, "appends before the outage", func() bool { return a.ackedCount() >= 20 })
	eventually(t, "followers before the outage", func() bool { return followers[0].count() >= 20 && followers[1].count() >= 20 })
	srv.Kill()
	before := a.ackedCount()
	eventually(t, "503 answers during the outage", func() bool { return a.unavailableCount() >= 3 })
	srv.Restart(t)
	eventually(t, "appends after the restart", func() bool { return a.ackedCount() >= before+20 })
	a.stop()

	stored := readAll(t, ctxURL)
	checkStream(t, a, stored)
	for i, f := range followers {
		eventually(t, fmt.Sprintf("follower %d catching up with %d events", i, len(stored)), func() bool { return f.count() >= len(stored) })
		f.check(t, fmt.Sprintf("follower %d", i), stored)
	}
	stopFollowers()
	t.Logf("%d batches acknowledged, %d answered 503 with Retry-After (none stored), %d outcome_unknown, statuses %v", a.ackedCount(), a.unavailableCount(), a.unknown, a.statuses)
}

// TestPubSubKilled kills nqd's Pub/Sub connections to Redis while clients
// stream several contexts: the live path recovers and no client misses an
// event or sees one twice.
func TestPubSubKilled(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	base := startApp(t, srv.Addr)

	const contexts, perContext = 3, 3
	fctx, stopFollowers := context.WithCancel(context.Background())
	defer stopFollowers()
	var appenders []*appender
	var followers [][]*follower
	for i := range contexts {
		id := fmt.Sprintf("pubsub-%d", i)
		var fs []*follower
		for range perContext {
			fs = append(fs, follow(fctx, base+"/api/_events/flow/"+id+"/stream"))
		}
		followers = append(followers, fs)
		a := newAppender(base, "flow", id)
		appenders = append(appenders, a)
		go a.run()
	}
	progress := func(n int) func() bool {
		return func() bool {
			for i, a := range appenders {
				if a.ackedCount() < n {
					return false
				}
				for _, f := range followers[i] {
					if f.count() < n*batchSize {
						return false
					}
				}
			}
			return true
		}
	}
	eventually(t, "streaming before the kills", progress(10))
	rdb := redisClient(t, srv.Addr)
	for kill := range 3 {
		n, err := rdb.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Result()
		if err != nil || n == 0 {
			t.Fatalf("kill %d: CLIENT KILL TYPE pubsub killed %d clients: %v", kill, n, err)
		}
		eventually(t, fmt.Sprintf("streaming after kill %d", kill), progress(10*(kill+2)))
	}
	for _, a := range appenders {
		a.stop()
	}
	for i, a := range appenders {
		stored := readAll(t, base+"/api/_events/flow/"+fmt.Sprintf("pubsub-%d", i))
		checkStream(t, a, stored)
		for j, f := range followers[i] {
			eventually(t, "followers catching up", func() bool { return f.count() >= len(stored) })
			f.check(t, fmt.Sprintf("context %d follower %d", i, j), stored)
		}
	}
	if v := scrapeValue(t, base, "nqd_live_resubscribes_total"); v == "" || v == "0" {
		t.Errorf("nqd_live_resubscribes_total = %q after killing the live feed", v)
	}
	stopFollowers()
}

// redisClient is a client of the Redis at addr, closed with the test.
func redisClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
