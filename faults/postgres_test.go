package faults

import (
	"context"
	"fmt"
	"testing"

	"github.com/nqd-dev/nqd/internal/pgtest"
)

// TestPostgresRestart kills PostgreSQL (the postmaster and every backend, as
// a crash would) during appends and streaming and starts it again: appends
// in the outage answer 503 with Retry-After (or 504 outcome_unknown for one
// whose commit went out as the server died) and none is half applied, no
// acknowledged event is lost, nqd recovers without a restart of its own, and
// a client that resumes by Last-Event-ID receives every event once, in order.
func TestPostgresRestart(t *testing.T) {
	srv := pgtest.Start(t)
	base := startAppOn(t, "-postgres-url", srv.URL)
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
	t.Logf("%d batches acknowledged, %d answered 503 with Retry-After, statuses %v (504: outcome unknown)", a.ackedCount(), a.unavailableCount(), a.statuses)
}
