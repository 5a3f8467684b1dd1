package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/examples/demo"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/sdk/go/worker"
)

// TestClusterFailover kills, with SIGKILL, the Redis Cluster primary that
// serves nqd's slot while clients append to several contexts and stream
// them, and runs of a three-step flow go through a worker; its replica takes
// over (the cluster's own failure detection) and the killed node comes back
// as the new replica. With NQ_REDIS_WAIT_REPLICAS=1 every acknowledged
// event is stored once, no batch is half applied or stored twice, every SSE
// client receives every event once, in order, and every run started
// completes once.
func TestClusterFailover(t *testing.T) {
	r := clusterFailover(t, 1)
	if r.lost > 0 {
		t.Errorf("%d acknowledged events lost with a replica acknowledging every write", r.lost)
	}
}

// TestClusterFailoverLossWindow is the same failover without waiting for
// replicas: what the primary acknowledged in its last moments may not have
// reached the replica. It measures how much, and how long before the kill it
// was acknowledged, rather than asserting a bound that asynchronous
// replication cannot promise.
func TestClusterFailoverLossWindow(t *testing.T) {
	r := clusterFailover(t, 0)
	t.Logf("without waiting for replicas: %d of %d acknowledged events lost, acknowledged at most %s before the kill", r.lost, r.acked, r.window)
}

type failoverResult struct {
	acked, lost int
	window      time.Duration // from the oldest lost event to the kill
}

// TestClusterReshard moves the slot range holding nqd's slot to another
// primary with redis-cli --cluster reshard under the same load: every
// acknowledged event is stored once, every SSE client receives every event
// once, in order, and every run ends once.
func TestClusterReshard(t *testing.T) {
	r := clusterUnderLoad(t, 1, true)
	if r.lost > 0 {
		t.Errorf("%d acknowledged events lost in a resharding", r.lost)
	}
}

func clusterFailover(t *testing.T, replicas int) failoverResult {
	return clusterUnderLoad(t, replicas, false)
}

// reshardSlots is how many slots TestClusterReshard moves.
const reshardSlots = 50

// clusterUnderLoad runs nqd on a cluster of its own under appends, streams
// and flow runs, and kills the primary serving nqd's slot (or, with
// reshard, moves the slot to another primary) midway.
func clusterUnderLoad(t *testing.T, replicas int, reshard bool) failoverResult {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{NodeTimeout: time.Second})
	prefix := "nqf"
	if reshard {
		prefix = cl.LowSlotTag(t, "nqr", reshardSlots)
	}
	base := startAppOn(t, "-redis-url", cl.URL(), "-prefix", prefix, "-redis-wait-replicas", strconv.Itoa(replicas), "-flows-dir", "../examples/flows",
		// Longer than the failover (2-3s), as a lease must be for a
		// worker's reports to outlast it; short enough that a job left
		// leased to nobody would end its run within the test.
		"-job-lease", "10s")
	startDemoWorker(t, base)
	starter := newStarter(base, "pipeline")
	go starter.run()

	fctx, stopFollowers := context.WithCancel(context.Background())
	defer stopFollowers()
	var appenders []*appender
	var followers []*follower
	for i := range 4 {
		id := "failover-" + strconv.Itoa(i)
		a := newAppender(base, "flow", id)
		appenders = append(appenders, a)
		go a.run()
		followers = append(followers, follow(fctx, base+"/api/_events/flow/"+id+"/stream"))
	}
	for _, a := range appenders {
		eventually(t, "appends before the failover", func() bool { return a.ackedCount() >= 20 })
	}
	eventually(t, "runs before the failover", func() bool { return starter.count() >= 5 })
	for _, f := range followers {
		eventually(t, "followers before the failover", func() bool { return f.count() >= 20 })
	}

	ctx := context.Background()
	primary, err := cl.PrimaryOf(ctx, "{"+prefix+"}")
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	before := make([]int, len(appenders))
	var promoted time.Duration
	if reshard {
		for i, a := range appenders {
			before[i] = a.ackedCount()
		}
		cl.Reshard(t, "{"+prefix+"}", reshardSlots)
		promoted = time.Since(killed)
	} else {
		primary.Kill()
		for i, a := range appenders {
			before[i] = a.ackedCount()
		}
		cl.WaitFailover(t, "{"+prefix+"}", primary)
		promoted = time.Since(killed)
		primary.Restart(t)
		cl.WaitReplicaOf(t, primary)
	}
	for i, a := range appenders {
		eventually(t, "appends after the failover", func() bool { return a.ackedCount() >= before[i]+20 })
	}
	runsBefore := starter.count()
	eventually(t, "runs after the failover", func() bool { return starter.count() >= runsBefore+5 })
	for _, a := range appenders {
		a.stop()
	}
	starter.stop()

	var r failoverResult
	var unavailable, unknown int
	for i, a := range appenders {
		stored := readAll(t, base+"/api/_events/flow/failover-"+strconv.Itoa(i))
		lost, oldest := lostAcked(a, stored)
		r.acked += len(a.acked) * batchSize
		r.lost += lost
		if lost > 0 {
			r.window = max(r.window, killed.Sub(oldest.Time()))
		}
		unavailable += a.unavailable
		unknown += a.unknown
		if replicas == 0 {
			continue // the checks below hold only for what was kept
		}
		checkStream(t, a, stored)
		f := followers[i]
		eventually(t, fmt.Sprintf("follower %d catching up with %d events", i, len(stored)), func() bool { return f.count() >= len(stored) })
		f.check(t, fmt.Sprintf("follower %d", i), stored)
	}
	stopFollowers()
	failedRuns := 0
	if replicas > 0 {
		// The pipeline flow has no failing step, and a claim or a report
		// whose answer the disruption lost is sent again and answered as
		// it was the first time: every run completes.
		if failedRuns = starter.check(t, base); failedRuns > 0 {
			t.Errorf("%d runs failed; with a replica acknowledging every write, every run completes", failedRuns)
		}
	}
	what := "replica promoted"
	if reshard {
		what = "slots moved"
	}
	t.Logf("replicas waited for: %d; %s %s after the start; %d events acknowledged, %d appends answered 503, %d answered 504 outcome_unknown; %d runs started, each ended once, %d failed",
		replicas, what, promoted.Round(time.Millisecond), r.acked, unavailable, unknown, starter.count(), failedRuns)
	return r
}

// lostAcked counts the events a acknowledged that stored lacks, and returns
// the id of the oldest of them.
func lostAcked(a *appender, stored []storedEvent) (int, event.ID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	have := map[string]bool{}
	for _, e := range stored {
		have[e.ID] = true
	}
	lost := 0
	var oldest event.ID
	for _, ids := range a.acked {
		for _, id := range ids {
			if have[id] {
				continue
			}
			lost++
			if eid, err := event.ParseID(id); err == nil && (oldest.IsZero() || eid.Compare(oldest) < 0) {
				oldest = eid
			}
		}
	}
	return lost, oldest
}

// startDemoWorker runs the demo worker's handlers in this process until the
// test ends.
func startDemoWorker(t *testing.T, base string) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		cfg := worker.Config{BaseURL: base, Concurrency: 4, Queues: []string{"default"},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if err := worker.Run(ctx, cfg, demo.Handlers(demo.Options{Epochs: 1})); err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// starter starts runs of a flow one after another, each under an
// Idempotency-Key of its own that it sends again until it is answered with
// the run's id, and keeps those ids.
type starter struct {
	url string

	mu       sync.Mutex
	ids      []string
	stopping atomic.Bool
	done     chan struct{}
}

func newStarter(base, flow string) *starter {
	return &starter{url: base + "/api/_flows/" + flow + "/start", done: make(chan struct{})}
}

func (s *starter) run() {
	defer close(s.done)
	for n := 0; !s.stopping.Load(); n++ {
		for !s.stopping.Load() {
			if id := s.start(n); id != "" {
				s.mu.Lock()
				s.ids = append(s.ids, id)
				s.mu.Unlock()
				break
			}
			time.Sleep(50 * time.Millisecond) // the Retry-After a client would honour, shortened
		}
	}
}

// start sends start n once and returns the run's id, "" without an answer.
func (s *starter) start(n int) string {
	req, err := http.NewRequest(http.MethodPost, s.url, strings.NewReader(`{"n":`+strconv.Itoa(n)+`}`))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "start-"+strconv.Itoa(n))
	resp, err := client.Do(req)
	if err != nil {
		return ""
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		FlowID string `json:"flowId"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil {
		return ""
	}
	return body.FlowID
}

func (s *starter) stop() {
	s.stopping.Store(true)
	<-s.done
}

func (s *starter) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

// check waits for every run started to end and checks that each ended
// once: one terminal event in its stream, one entry among the flow's
// finished runs, and no run the starter did not start. It returns how many
// failed, logging why.
func (s *starter) check(t *testing.T, base string) (failed int) {
	t.Helper()
	s.mu.Lock()
	ids := slices.Clone(s.ids)
	s.mu.Unlock()
	if len(ids) != len(slices.Compact(slices.Sorted(slices.Values(ids)))) {
		t.Errorf("a start answered with the id of another start: %v", ids)
	}
	ended := func() map[string]int {
		out := map[string]int{}
		for _, status := range []string{"completed", "failed"} {
			for offset := 0; ; offset += 100 {
				var page struct {
					Items []struct {
						ID string `json:"id"`
					} `json:"items"`
				}
				getJSON(t, base+"/api/_flows/pipeline/runs?status="+status+"&limit=100&offset="+strconv.Itoa(offset), &page)
				for _, r := range page.Items {
					out[r.ID]++
				}
				if len(page.Items) < 100 {
					break
				}
			}
		}
		return out
	}
	deadline := time.Now().Add(waitFor)
	done := ended()
	for len(done) < len(ids) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // polling the runs list, bounded by deadline
		done = ended()
	}
	for _, id := range ids {
		if done[id] != 1 {
			t.Errorf("run %s is listed %d times among the finished runs", id, done[id])
		}
		var evs struct {
			Events []struct {
				Kind string          `json:"kind"`
				Data json.RawMessage `json:"data"`
			} `json:"events"`
		}
		getJSON(t, base+"/api/_events/flow/"+id+"?limit=1000", &evs)
		ends := 0
		for _, e := range evs.Events {
			switch e.Kind {
			case "step.failed":
				t.Logf("run %s: step.failed %s", id, e.Data)
			case "flow.failed":
				failed++
				ends++
			case "flow.completed", "flow.canceled", "flow.cancelled":
				ends++
			}
		}
		if ends != 1 {
			t.Errorf("run %s ended %d times: %+v", id, ends, evs.Events)
		}
	}
	if len(done) != len(ids) {
		t.Errorf("%d runs ended, %d were started", len(done), len(ids))
	}
	return failed
}

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
