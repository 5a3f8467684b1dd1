package faults

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/internal/redistest"
)

// replicaStall is how long TestClusterStalledReplica* freeze the replica
// before the primary dies: a replica that falls behind for that long, as
// on a congested or cut link.
const replicaStall = 2 * time.Second

// TestClusterStalledReplicaLoses measures the loss window of asynchronous
// replication, which loopback replication is too fast to show by itself:
// under appends, the replica of nqd's slot is frozen (SIGSTOP) for
// replicaStall, then its primary is killed (SIGKILL), the replica resumed
// and promoted (CLUSTER FAILOVER TAKEOVER). Without waiting for replicas
// the primary acknowledged what the replica never got; the test logs how
// much, beside the replication lag sampled under the same load before the
// stall. It asserts no bound: the loss is what asynchronous replication
// allows, and what the replica's socket buffers held is not lost.
func TestClusterStalledReplicaLoses(t *testing.T) {
	stalledReplica(t, 0)
}

// TestClusterStalledReplicaWait is the same stall with
// NQ_REDIS_WAIT_REPLICAS=1: no write made during the stall is acknowledged
// (WAIT times out; the appends answer 504 outcome_unknown or time out), so
// no acknowledged event is lost, none is half stored or stored twice.
func TestClusterStalledReplicaWait(t *testing.T) {
	stalledReplica(t, 1)
}

func stalledReplica(t *testing.T, replicas int) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{NodeTimeout: time.Second})
	prefix := "nqs"
	base := startAppOn(t, "-redis-url", cl.URL(), "-prefix", prefix, "-redis-wait-replicas", strconv.Itoa(replicas))
	var appenders []*appender
	for i := range 4 {
		a := newAppender(base, "flow", "stall-"+strconv.Itoa(i))
		appenders = append(appenders, a)
		go a.run()
	}
	acked := func() int {
		n := 0
		for _, a := range appenders {
			n += a.ackedCount() * batchSize
		}
		return n
	}
	for _, a := range appenders {
		eventually(t, "appends before the stall", func() bool { return a.ackedCount() >= 20 })
	}

	ctx := context.Background()
	primary, err := cl.PrimaryOf(ctx, "{"+prefix+"}")
	if err != nil {
		t.Fatal(err)
	}
	replica := cl.ReplicaOf(ctx, primary)
	if replica == nil {
		t.Fatal("the primary of nqd's slot has no replica online")
	}
	pc := redis.NewClient(&redis.Options{Addr: primary.Addr, MaxRetries: -1})
	defer func() { _ = pc.Close() }()
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr, MaxRetries: -1})
	defer func() { _ = rc.Close() }()

	lag := sampleLag(t, pc, rc, acked)

	replicaAt := replInt(t, rc, "slave_repl_offset")
	ackedAt := acked()
	replica.Stop(t)
	// The stall is the fault's length, not a wait for a condition.
	time.Sleep(replicaStall)
	primaryAt := replInt(t, pc, "master_repl_offset")
	ackedInStall := acked() - ackedAt
	primary.Kill()
	killed := time.Now()
	replica.Continue(t)
	cl.TakeOver(t, replica)
	cl.WaitFailover(t, "{"+prefix+"}", primary)
	promoted := time.Since(killed)
	// Where the replica's copy of the old primary's history ends: what it
	// had at the stall and read from its socket buffers after it.
	got := replInt(t, rc, "second_repl_offset") - 1
	before := make([]int, len(appenders))
	for i, a := range appenders {
		before[i] = a.ackedCount()
	}
	primary.Restart(t)
	cl.WaitReplicaOf(t, primary)
	for i, a := range appenders {
		eventually(t, "appends after the failover", func() bool { return a.ackedCount() >= before[i]+20 })
	}
	for _, a := range appenders {
		a.stop()
	}

	lost, total, unknown, unavailable := 0, 0, 0, 0
	for i, a := range appenders {
		stored := readAll(t, base+"/api/_events/flow/stall-"+strconv.Itoa(i))
		n, _ := lostAcked(a, stored)
		lost += n
		total += len(a.acked) * batchSize
		unknown += a.unknown
		unavailable += a.unavailable
		if replicas > 0 {
			checkStream(t, a, stored)
		}
	}
	if replicas > 0 && lost > 0 {
		t.Errorf("%d acknowledged events lost with a replica acknowledging every write", lost)
	}
	t.Logf("replicas waited for: %d; replication lag under load (%d samples, %.1f events/ms, %d bytes/event): median %d bytes, max %d bytes (%.1f events)",
		replicas, len(lag.samples), lag.eventsPerMS, lag.bytesPerEvent, lag.median(), lag.max(), float64(lag.max())/float64(max(lag.bytesPerEvent, 1)))
	t.Logf("replica stalled %s: %d events acknowledged during the stall; the primary was %d bytes ahead at the kill, the replica read %d of them from its socket buffers after it, %d bytes never reached it (%.0f events at %d bytes/event)",
		replicaStall, ackedInStall, primaryAt-replicaAt, got-replicaAt, primaryAt-got, float64(primaryAt-got)/float64(max(lag.bytesPerEvent, 1)), lag.bytesPerEvent)
	t.Logf("replica promoted %s after the kill; %d of %d acknowledged events lost; %d appends answered 504 outcome_unknown, %d answered 503",
		promoted.Round(time.Millisecond), lost, total, unknown, unavailable)
}

// lagSamples is the replication lag sampled under load: how many bytes of
// the replication stream the primary had that its replica did not.
type lagSamples struct {
	samples       []int64
	bytesPerEvent int64
	eventsPerMS   float64
}

func (l lagSamples) median() int64 { return l.samples[len(l.samples)/2] }
func (l lagSamples) max() int64    { return l.samples[len(l.samples)-1] }

// sampleLag reads the primary's offset, then the replica's, every 10 ms for
// a second: the difference is what the replica lacked of what the primary
// had at the first read (0 when it had it all by the second).
func sampleLag(t *testing.T, pc, rc *redis.Client, acked func() int) lagSamples {
	t.Helper()
	var l lagSamples
	start, startAcked, startAt := replInt(t, pc, "master_repl_offset"), acked(), time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for range 100 {
		<-tick.C
		p := replInt(t, pc, "master_repl_offset")
		r := replInt(t, rc, "slave_repl_offset")
		l.samples = append(l.samples, max(p-r, 0))
	}
	slices.Sort(l.samples)
	events := int64(acked() - startAcked)
	l.bytesPerEvent = (replInt(t, pc, "master_repl_offset") - start) / max(events, 1)
	l.eventsPerMS = float64(events) / float64(time.Since(startAt).Milliseconds())
	return l
}

// replInt reads one field of INFO replication.
func replInt(t *testing.T, c *redis.Client, field string) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "replication").Result()
	if err != nil {
		t.Fatalf("INFO replication of %s: %v", c.Options().Addr, err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO replication %s: %q", field, v)
			}
			return n
		}
	}
	t.Fatalf("INFO replication of %s has no %s", c.Options().Addr, field)
	return 0
}
