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
	"github.com/nqd-dev/nqd/store/redisstore"
)

// TestClusterFailover kills, with SIGKILL, the Redis Cluster primary that
// serves nqd's slot while clients append to several contexts and stream
// them, and runs of a three-step flow go through a worker; its replica takes
// over (the cluster's own failure detection) and the killed node comes back
// as the new replica. With NQ_REDIS_WAIT_REPLICAS=1 every acknowledged
// event is stored once, no batch is half applied or stored twice, every SSE
// client receives every event once, in order, and every run started
// completes once.
//
// With nine shards every primary holds three: the killed one holds only
// some of the deployment's runs and contexts, and the runs on the others
// keep completing while it is down.
func TestClusterFailover(t *testing.T) {
	for _, shards := range clusterShards {
		t.Run(shardsName(shards), func(t *testing.T) {
			r := clusterUnderLoad(t, 1, false, shards)
			if r.lost > 0 {
				t.Errorf("%d acknowledged events lost with a replica acknowledging every write", r.lost)
			}
		})
	}
}

// clusterShards are the layouts the failover and the resharding run on:
// the one hash tag nqd always had, and nine shards spread over the test
// cluster's three primaries.
var clusterShards = []int{1, 9}

func shardsName(n int) string {
	if n == 1 {
		return "1 shard"
	}
	return strconv.Itoa(n) + " shards"
}

// TestClusterFailoverLossWindow is the same failover without waiting for
// replicas: what the primary acknowledged in its last moments may not have
// reached the replica. It measures how much, and how long before the kill it
// was acknowledged, rather than asserting a bound that asynchronous
// replication cannot promise.
func TestClusterFailoverLossWindow(t *testing.T) {
	r := clusterUnderLoad(t, 0, false, 1)
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
//
// With nine shards the slots moved hold one of them.
func TestClusterReshard(t *testing.T) {
	for _, shards := range clusterShards {
		t.Run(shardsName(shards), func(t *testing.T) {
			r := clusterUnderLoad(t, 1, true, shards)
			if r.lost > 0 {
				t.Errorf("%d acknowledged events lost in a resharding", r.lost)
			}
		})
	}
}

// reshardSlots is how many slots TestClusterReshard moves.
const reshardSlots = 50

// starters is how many clients start runs side by side: a start waits
// while its run's primary is down, and the others keep starting runs on
// the other shards.
const starters = 4

// clusterUnderLoad runs nqd, its keys over shards, on a cluster of its own
// under appends, streams and flow runs, and kills the primary serving the
// first appender's shard (or, with reshard, moves that shard's slot to
// another primary) midway.
func clusterUnderLoad(t *testing.T, replicas int, reshard bool, shards int) failoverResult {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{NodeTimeout: time.Second})
	prefix := "nqf"
	// tag is the hash tag of the shard that the kill or the resharding
	// hits: one whose slot Reshard moves.
	tag := redisstore.ShardTags(prefix, shards)[redisstore.ShardOf("failover-0", shards)]
	if reshard {
		prefix, tag = reshardPrefix(t, cl, shards)
	}
	base := startAppOn(t, "-redis-url", cl.URL(), "-prefix", prefix, "-redis-shards", strconv.Itoa(shards),
		"-redis-wait-replicas", strconv.Itoa(replicas), "-flows-dir", "../examples/flows",
		// Longer than the failover (2-3s), as a lease must be for a
		// worker's reports to outlast it; short enough that a job left
		// leased to nobody would end its run within the test.
		"-job-lease", "10s")
	startDemoWorker(t, base)
	var runs []*starter
	for i := range starters {
		s := newStarter(base, "pipeline", strconv.Itoa(i))
		runs = append(runs, s)
		go s.run()
	}
	started := func() int {
		n := 0
		for _, s := range runs {
			n += s.count()
		}
		return n
	}

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
	eventually(t, "runs before the failover", func() bool { return started() >= 5 })
	for _, f := range followers {
		eventually(t, "followers before the failover", func() bool { return f.count() >= 20 })
	}

	ctx := context.Background()
	primary, err := cl.PrimaryOf(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	// hit says which shards the kill or the resharding hits: those on the
	// same primary as tag's.
	hit := make([]bool, shards)
	for i, st := range redisstore.ShardTags(prefix, shards) {
		p, err := cl.PrimaryOf(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		hit[i] = p == primary && (!reshard || st == tag)
	}
	killed := time.Now()
	before := make([]int, len(appenders))
	var promoted time.Duration
	if reshard {
		for i, a := range appenders {
			before[i] = a.ackedCount()
		}
		cl.Reshard(t, tag, reshardSlots)
		promoted = time.Since(killed)
	} else {
		primary.Kill()
		for i, a := range appenders {
			before[i] = a.ackedCount()
		}
		cl.WaitFailover(t, tag, primary)
		promoted = time.Since(killed)
		primary.Restart(t)
		cl.WaitReplicaOf(t, primary)
	}
	for i, a := range appenders {
		eventually(t, "appends after the failover", func() bool { return a.ackedCount() >= before[i]+20 })
	}
	runsBefore := started()
	eventually(t, "runs after the failover", func() bool { return started() >= runsBefore+5 })
	for _, a := range appenders {
		a.stop()
	}
	for _, s := range runs {
		s.stop()
	}

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
	var endedIn [2]int // runs that ended between the kill and the promotion, on shards not hit and hit
	if replicas > 0 {
		// The pipeline flow has no failing step, and a claim or a report
		// whose answer the disruption lost is sent again and answered as
		// it was the first time: every run completes.
		ends := map[string]time.Time{}
		listed := 0
		// Every starter's runs end before any list is read for the checks:
		// a run ending while the list is paged through shifts the pages
		// behind it, so it could be read twice or not at all.
		for _, s := range runs {
			s.awaitEnded(t, base)
		}
		for _, s := range runs {
			failed, n := s.check(t, base, ends)
			failedRuns, listed = failedRuns+failed, n
		}
		if listed != started() {
			t.Errorf("%d runs listed as finished, %d were started", listed, started())
		}
		if failedRuns > 0 {
			t.Errorf("%d runs failed; with a replica acknowledging every write, every run completes", failedRuns)
		}
		for id, at := range ends {
			if !at.Before(killed) && at.Before(killed.Add(promoted)) {
				if hit[redisstore.ShardOf(id, shards)] {
					endedIn[1]++
				} else {
					endedIn[0]++
				}
			}
		}
		// Claims pass over the failing shards, and starts and steps read
		// the definitions nqd has, so that the runs of the shards on the
		// other primaries carry on.
		if !reshard && shards > 1 && endedIn[0] == 0 {
			t.Errorf("no run on the %d shards not hit ended while the primary was down", shards-hitShards(hit))
		}
	}
	what := "replica promoted"
	if reshard {
		what = "slots moved"
	}
	t.Logf("shards: %d, %d of them hit; replicas waited for: %d; %s %s after the start; %d events acknowledged, %d lost, %d appends answered 503, %d answered 504 outcome_unknown; %d runs started, each ended once, %d failed; runs ended in between: %d on the shards not hit, %d on those hit",
		shards, hitShards(hit), replicas, what, promoted.Round(time.Millisecond), r.acked, r.lost, unavailable, unknown, started(), failedRuns, endedIn[0], endedIn[1])
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
	url, name string

	mu       sync.Mutex
	ids      []string
	stopping atomic.Bool
	done     chan struct{}
}

// newStarter returns a starter whose Idempotency-Keys carry name.
func newStarter(base, flow, name string) *starter {
	return &starter{url: base + "/api/_flows/" + flow + "/start", name: name, done: make(chan struct{})}
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
	req.Header.Set("Idempotency-Key", "start-"+s.name+"-"+strconv.Itoa(n))
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

// finishedRuns reads the pipeline flow's completed and failed runs, page
// by page, counting how often each id is listed.
func finishedRuns(t *testing.T, base string) map[string]int {
	t.Helper()
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

// awaitEnded waits until every run s started is listed as finished.
func (s *starter) awaitEnded(t *testing.T, base string) {
	t.Helper()
	s.mu.Lock()
	ids := slices.Clone(s.ids)
	s.mu.Unlock()
	deadline := time.Now().Add(waitFor)
	for {
		done := finishedRuns(t, base)
		if !slices.ContainsFunc(ids, func(id string) bool { return done[id] == 0 }) {
			return
		}
		if time.Now().After(deadline) {
			return // check reports the runs that did not end
		}
		time.Sleep(50 * time.Millisecond) // polling the runs list, bounded by deadline
	}
}

// check checks that each run s started ended exactly once and is listed
// once among the finished runs; every starter's runs have ended
// (awaitEnded), so the list holds still. It returns how many failed,
// logging why, and how many runs the flow lists as finished; it records in
// ends when each ended.
func (s *starter) check(t *testing.T, base string, ends map[string]time.Time) (failed, listed int) {
	t.Helper()
	s.mu.Lock()
	ids := slices.Clone(s.ids)
	s.mu.Unlock()
	if len(ids) != len(slices.Compact(slices.Sorted(slices.Values(ids)))) {
		t.Errorf("a start answered with the id of another start: %v", ids)
	}
	done := finishedRuns(t, base)
	for _, id := range ids {
		if done[id] != 1 {
			t.Errorf("run %s is listed %d times among the finished runs", id, done[id])
		}
		var evs struct {
			Events []struct {
				ID   string          `json:"id"`
				Kind string          `json:"kind"`
				Data json.RawMessage `json:"data"`
			} `json:"events"`
		}
		getJSON(t, base+"/api/_events/flow/"+id+"?limit=1000", &evs)
		terminal := 0
		for _, e := range evs.Events {
			switch e.Kind {
			case "step.failed":
				t.Logf("run %s: step.failed %s", id, e.Data)
			case "flow.failed":
				failed++
				terminal++
			case "flow.completed", "flow.canceled", "flow.cancelled":
				terminal++
			default:
				continue
			}
			if eid, err := event.ParseID(e.ID); err == nil {
				ends[id] = eid.Time()
			}
		}
		if terminal != 1 {
			t.Errorf("run %s ended %d times: %+v", id, terminal, evs.Events)
		}
	}
	return failed, len(done)
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

// reshardPrefix returns a prefix one of whose shards has its slot among
// the reshardSlots lowest of its primary, and that shard's hash tag: a
// shard that Reshard moves.
func reshardPrefix(t *testing.T, cl *redistest.Cluster, shards int) (prefix, tag string) {
	t.Helper()
	if shards == 1 {
		p := cl.LowSlotTag(t, "nqr", reshardSlots)
		return p, "{" + p + "}"
	}
	for i := range 10000 {
		p := "nqr" + strconv.Itoa(i)
		for _, tag := range redisstore.ShardTags(p, shards) {
			if cl.InLowSlots(t, tag, reshardSlots) {
				return p, tag
			}
		}
	}
	t.Fatalf("no prefix with a shard in the %d lowest slots of a primary", reshardSlots)
	return "", ""
}

// hitShards counts the shards hit says a disruption hits.
func hitShards(hit []bool) int {
	n := 0
	for _, h := range hit {
		if h {
			n++
		}
	}
	return n
}
