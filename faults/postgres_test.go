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

// TestPostgresTwoInstances runs two nqd instances on one PostgreSQL database,
// appends to the same contexts through both at once, and follows every
// context from both: each client receives every event of its context once,
// in id order, whichever instance stored it. Ids stay monotonic per context
// only if the database serializes appends across instances, and a client of
// one instance sees the other's appends only through the notifications and
// gap repair, so this is the test of both.
func TestPostgresTwoInstances(t *testing.T) {
	url := pgtest.URL(t)
	bases := []string{startAppOn(t, "-postgres-url", url), startAppOn(t, "-postgres-url", url)}

	// perAppender batches of batchSize events, from each instance to each
	// context: 3×2×250×2 = 3,000 events in all.
	const contexts, perAppender = 3, 250
	fctx, stopFollowers := context.WithCancel(context.Background())
	defer stopFollowers()
	var appenders [][]*appender
	var followers [][]*follower
	for i := range contexts {
		id := fmt.Sprintf("two-%d", i)
		var as []*appender
		var fs []*follower
		for b, base := range bases {
			for range 2 {
				fs = append(fs, follow(fctx, base+"/api/_events/flow/"+id+"/stream"))
			}
			a := newAppender(base, "flow", id)
			// Batch numbers are the idempotency keys and the data the
			// stream check reads: each instance's appender gets a range of
			// its own so the two neither collide nor dedupe each other.
			a.next = b * 1_000_000
			as = append(as, a)
		}
		appenders = append(appenders, as)
		followers = append(followers, fs)
	}
	for _, as := range appenders {
		for _, a := range as {
			go a.run()
		}
	}
	eventually(t, fmt.Sprintf("%d batches through each instance to each context", perAppender), func() bool {
		for _, as := range appenders {
			for _, a := range as {
				if a.ackedCount() < perAppender {
					return false
				}
			}
		}
		return true
	})
	for _, as := range appenders {
		for _, a := range as {
			a.stop()
		}
	}

	total, reconnects := 0, 0
	for i, as := range appenders {
		ctxPath := "/api/_events/flow/" + fmt.Sprintf("two-%d", i)
		stored := readAll(t, bases[0]+ctxPath)
		if other := readAll(t, bases[1]+ctxPath); fmt.Sprint(other) != fmt.Sprint(stored) {
			t.Errorf("context %d: the instances read different streams (%d and %d events)", i, len(stored), len(other))
		}
		for _, a := range as {
			checkStream(t, a, stored)
		}
		for j, f := range followers[i] {
			eventually(t, fmt.Sprintf("context %d follower %d catching up with %d events", i, j, len(stored)), func() bool { return f.count() >= len(stored) })
			f.check(t, fmt.Sprintf("context %d follower %d (instance %d)", i, j, j/2), stored)
		}
		total += len(stored)
	}
	stopFollowers()
	// A follower that was cut off resumes from the table rather than the live
	// feed; the count says how much of the run the live path alone carried.
	for _, fs := range followers {
		for _, f := range fs {
			<-f.done
			reconnects += f.connects - 1
		}
	}
	t.Logf("%d events in %d contexts through 2 instances, %d followers each, %d reconnects", total, contexts, len(followers[0]), reconnects)
}
