package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/redis/go-redis/v9"
)

// The e2e profile drives whole flow runs the way an application does: C
// closed-loop starters, each posting a start and reading the new run's
// event stream until the run is done, then starting the next. The flow is
// one step that does nothing, served by cmd/noop-worker (the Go worker SDK)
// in a process of its own, so what is measured is nqd's path per run: the
// start, a claim, the step's completion, and the stream. Given a running
// Node original (node.go), every nqd row is raced against it in the same
// round, the two alternating which goes first.

// e2eFlow is the one-step flow the profile stores, and its queue.
const (
	e2eFlow  = "e2e-noop"
	e2eQueue = "e2e"
	e2eDef   = "entry: noop\nsteps:\n  noop: {queue: " + e2eQueue + "}\n"
)

// The systems of a row.
const (
	sysNQD  = "nqd"
	sysNode = "node"
)

// e2eRow is one measurement: a system, the nqd store it is paired with, a
// concurrency, many runs.
type e2eRow struct {
	System      string `json:"system"`
	Store       string `json:"store"`
	Concurrency int    `json:"concurrency"`
	Round       int    `json:"round"`
	Runs        int64  `json:"runs"`
	Errors      int64  `json:"errors"`
	// Lost are runs whose stream stalled before showing them done (see
	// target.stall). Seconds leaves out the time starters spent waiting
	// on them, over C: a lost stream costs the rate nothing.
	Lost       int64   `json:"lost"`
	Seconds    float64 `json:"seconds"`
	RunsPerSec float64 `json:"runs_per_sec"`
	FirstP50ms float64 `json:"first_frame_p50_ms"`
	FirstP99ms float64 `json:"first_frame_p99_ms"`
	DoneP50ms  float64 `json:"done_p50_ms"`
	DoneP99ms  float64 `json:"done_p99_ms"`
	StartP50ms float64 `json:"start_p50_ms"`
	// CPUms is CPU-ms per run of each of the system's processes: nqd,
	// worker and redis (on Redis); node (the server) and redis.
	CPUms map[string]float64 `json:"cpu_ms_per_run"`
	// ClaimsPerRun is the worker's claim calls over the runs, from nqd's
	// own request counter.
	ClaimsPerRun float64 `json:"claims_per_run,omitempty"`
	// Busy is the share of all the machine's cores busy over the row;
	// DriverCPUms and OtherCPUms are CPU-ms per run of this tool (the
	// driver) and of every process neither system nor the tool owns.
	Busy        float64 `json:"machine_busy"`
	DriverCPUms float64 `json:"driver_cpu_ms_per_run"`
	OtherCPUms  float64 `json:"other_cpu_ms_per_run"`

	first, done *hdrhistogram.Histogram
}

// cpuAll is the CPU-ms per run of all the row's processes.
func (x e2eRow) cpuAll() float64 {
	var t float64
	for _, v := range x.CPUms {
		t += v
	}
	return t
}

// e2eSum is one system's rows of a store and concurrency over every round.
type e2eSum struct {
	Busy        float64            `json:"machine_busy"`
	DriverCPUms float64            `json:"driver_cpu_ms_per_run"`
	OtherCPUms  float64            `json:"other_cpu_ms_per_run"`
	Runs        int64              `json:"runs"`
	Lost        int64              `json:"lost"`
	RunsPerSec  float64            `json:"runs_per_sec"`
	FirstP50ms  float64            `json:"first_frame_p50_ms"`
	FirstP99ms  float64            `json:"first_frame_p99_ms"`
	DoneP50ms   float64            `json:"done_p50_ms"`
	DoneP99ms   float64            `json:"done_p99_ms"`
	CPUms       map[string]float64 `json:"cpu_ms_per_run"`
	CPUAll      float64            `json:"cpu_ms_per_run_all"`
}

// e2ePair is nqd on one store at one concurrency, and the Node original
// in the same rounds.
type e2ePair struct {
	Store       string  `json:"store"`
	Concurrency int     `json:"concurrency"`
	NQD         e2eSum  `json:"nqd"`
	Node        *e2eSum `json:"node,omitempty"`
}

// e2eResult is the whole profile.
type e2eResult struct {
	Rows  []e2eRow  `json:"rows"`
	Pairs []e2ePair `json:"pairs"`
	// Node is the raced Node original; NoNode says why there is none.
	Node   *nodeOriginal `json:"node,omitempty"`
	NoNode string        `json:"no_node,omitempty"`
	// LoadBefore and LoadAfter are the machine's load averages (1, 5 and
	// 15 minutes) as the profile began and ended.
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
	Rounds     int    `json:"rounds"`
	// SyncP50ms and SyncP99ms are how long a 4 KB write and fdatasync took
	// in the embedded store's directory, measured as the profile began: a
	// commit of the embedded store syncs twice.
	SyncP50ms float64 `json:"sync_p50_ms,omitempty"`
	SyncP99ms float64 `json:"sync_p99_ms,omitempty"`
}

// e2eOptions are the profile's flags.
type e2eOptions struct {
	worker   string // the noop-worker binary
	runs     int    // measured runs per row
	conc     []int
	stores   []string
	rounds   int
	pprofDir string // where nqd's CPU and allocation profiles go; empty takes none
	node     nodeFlags
}

// runE2E measures every store × concurrency, rounds times, each nqd row on
// a fresh nqd and worker and, with a Node original, next to a row of it.
// Redis rows use the tool's redis-server; embedded rows a fresh data
// directory under dir.
func runE2E(ctx context.Context, e env, dir string, nqdBin string, o e2eOptions) (e2eResult, error) {
	res := e2eResult{LoadBefore: loadAverage(), Rounds: o.rounds}
	if slices.Contains(o.stores, "embedded") {
		h, err := syncLatency(dir, 200)
		if err != nil {
			return res, fmt.Errorf("measure the disk's sync: %w", err)
		}
		res.SyncP50ms, res.SyncP99ms = histMS(h, 50), histMS(h, 99)
	}
	res.Node, res.NoNode = o.node.resolve()
	if res.Node == nil {
		fmt.Fprintf(os.Stderr, "nqbench: e2e: %s; measuring nqd alone\n", res.NoNode)
	}
	for round := range o.rounds {
		for _, c := range o.conc {
			for _, st := range o.stores {
				if ctx.Err() != nil {
					return res, ctx.Err()
				}
				nqd := func() error {
					row, err := e2eOnce(ctx, e, filepath.Join(dir, fmt.Sprintf("e2e-%s-%d-%d", st, c, round)), nqdBin, st, c, round, o)
					res.Rows = append(res.Rows, row)
					if err != nil {
						return fmt.Errorf("%s C=%d: %w", st, c, err)
					}
					return nil
				}
				node := func() error {
					if res.Node == nil {
						return nil
					}
					row, err := nodeOnce(ctx, res.Node, st, c, o.runs)
					row.Round = round
					res.Rows = append(res.Rows, row)
					if err != nil {
						return fmt.Errorf("the Node original beside %s C=%d: %w", st, c, err)
					}
					return nil
				}
				// Who goes first alternates, so that neither always
				// follows the other's leftovers.
				first, second := nqd, node
				if (round+len(res.Rows))%2 == 1 {
					first, second = node, nqd
				}
				if err := errors.Join(first(), second()); err != nil {
					return res.summed(), err
				}
			}
		}
	}
	return res.summed(), nil
}

// summed fills Pairs from the rows: runs/s over the rows' summed time,
// latencies from their merged histograms, CPU over their summed runs.
func (r e2eResult) summed() e2eResult {
	r.LoadAfter = loadAverage()
	r.Pairs = nil
	for _, c := range uniq(r.Rows, func(x e2eRow) int { return x.Concurrency }) {
		for _, st := range uniq(r.Rows, func(x e2eRow) string { return x.Store }) {
			p := e2ePair{Store: st, Concurrency: c}
			var ok bool
			if p.NQD, ok = r.sum(sysNQD, st, c); !ok {
				continue
			}
			if s, ok := r.sum(sysNode, st, c); ok {
				p.Node = &s
			}
			r.Pairs = append(r.Pairs, p)
		}
	}
	return r
}

func (r e2eResult) sum(system, st string, c int) (e2eSum, bool) {
	s := e2eSum{CPUms: map[string]float64{}}
	first, done := newHist(), newHist()
	var secs float64
	for _, x := range r.Rows {
		if x.System != system || x.Store != st || x.Concurrency != c || x.first == nil {
			continue
		}
		s.Runs += x.Runs
		s.Lost += x.Lost
		secs += x.Seconds
		first.Merge(x.first)
		done.Merge(x.done)
		for k, v := range x.CPUms {
			s.CPUms[k] += v * float64(x.Runs)
		}
		s.Busy += x.Busy * x.Seconds
		s.DriverCPUms += x.DriverCPUms * float64(x.Runs)
		s.OtherCPUms += x.OtherCPUms * float64(x.Runs)
	}
	if s.Runs == 0 {
		return s, false
	}
	s.RunsPerSec = float64(s.Runs) / secs
	s.FirstP50ms, s.FirstP99ms = histMS(first, 50), histMS(first, 99)
	s.DoneP50ms, s.DoneP99ms = histMS(done, 50), histMS(done, 99)
	for k, v := range s.CPUms {
		s.CPUms[k] = v / float64(s.Runs)
		s.CPUAll += s.CPUms[k]
	}
	s.Busy /= secs
	s.DriverCPUms /= float64(s.Runs)
	s.OtherCPUms /= float64(s.Runs)
	return s, true
}

func uniq[T comparable](rows []e2eRow, f func(e2eRow) T) []T {
	var out []T
	seen := map[T]bool{}
	for _, x := range rows {
		if k := f(x); !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

func histMS(h *hdrhistogram.Histogram, q float64) float64 {
	return float64(h.ValueAtQuantile(q)) / 1000
}

// syncLatency writes 4 KB and syncs it n times in a file in dir, and
// returns how long each took.
func syncLatency(dir string, n int) (*hdrhistogram.Histogram, error) {
	f, err := os.CreateTemp(dir, "sync-probe-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.Remove(f.Name()) }()
	defer func() { _ = f.Close() }()
	page := make([]byte, 4096)
	h := newHist()
	for i := range n {
		t0 := time.Now()
		if _, err := f.WriteAt(page, int64(i%16)*int64(len(page))); err != nil {
			return nil, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return nil, err
		}
		_ = h.RecordValue(max(time.Since(t0).Microseconds(), 1))
	}
	return h, nil
}

// loadAverage is the machine's load averages over 1, 5 and 15 minutes.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// machineMeter measures, over a row, the machine's busy share and the CPU
// of the tool and of everything else.
type machineMeter struct{ busy, total, self float64 }

func meterMachine() machineMeter {
	b, t := machineCPU()
	s, _ := cpuSeconds(os.Getpid())
	return machineMeter{busy: b, total: t, self: s}
}

// fill fills row's machine figures from m to e; own is the CPU seconds of
// the system's processes over the same time.
func (m machineMeter) fill(e machineMeter, row *e2eRow, own float64) {
	runs := float64(max(row.Runs, 1))
	row.Busy = safeDiv(e.busy-m.busy, e.total-m.total)
	row.DriverCPUms = (e.self - m.self) * 1000 / runs
	row.OtherCPUms = max(0, (e.busy-m.busy)-(e.self-m.self)-own) * 1000 / runs
}

// measure fills row from one closed loop's result.
func (row *e2eRow) measure(m loopResult) {
	row.Runs, row.Errors, row.Lost = m.runs, m.errors, m.lost
	row.Seconds = max(0, (m.elapsed - m.lostWait/time.Duration(max(row.Concurrency, 1))).Seconds())
	row.RunsPerSec = safeDiv(float64(m.runs), row.Seconds)
	row.first, row.done = m.first, m.done
	row.FirstP50ms, row.FirstP99ms = histMS(m.first, 50), histMS(m.first, 99)
	row.DoneP50ms, row.DoneP99ms = histMS(m.done, 50), histMS(m.done, 99)
	row.StartP50ms = histMS(m.start, 50)
}

// nodeOnce measures runs of the Node original's no-op flow at concurrency
// c, after a warm-up as nqd's rows have.
func nodeOnce(ctx context.Context, n *nodeOriginal, st string, c, runs int) (e2eRow, error) {
	row := e2eRow{System: sysNode, Store: st, Concurrency: c}
	hc := httpClient(2 * c)
	defer hc.CloseIdleConnections()
	t := n.target()
	name := fmt.Sprintf("e2e Node original C=%d", c)
	if _, err := closedLoop(ctx, hc, t, c, max(runs/10, 2*c), name+" warm-up"); err != nil {
		return row, err
	}
	cpu0 := make([]float64, len(n.PIDs))
	for i, pid := range n.PIDs {
		cpu0[i], _ = treeCPUSeconds(pid)
	}
	mach := meterMachine()
	m, err := closedLoop(ctx, hc, t, c, runs, name)
	machEnd := meterMachine()
	row.measure(m)
	row.CPUms = map[string]float64{}
	for i, pid := range n.PIDs {
		v, _ := treeCPUSeconds(pid)
		k := "node"
		if i > 0 {
			k = "redis"
		}
		row.CPUms[k] += (v - cpu0[i]) * 1000 / float64(max(m.runs, 1))
	}
	mach.fill(machEnd, &row, row.cpuAll()*float64(row.Runs)/1000)
	if err == nil && m.errors > 0 {
		err = fmt.Errorf("%d of %d runs failed; first: %v", m.errors, m.runs+m.errors, m.firstErr)
	}
	return row, err
}

func e2eOnce(ctx context.Context, e env, dir, nqdBin, storeName string, c, round int, o e2eOptions) (e2eRow, error) {
	row := e2eRow{System: sysNQD, Store: storeName, Concurrency: c, Round: round}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return row, err
	}
	storeEnv := "NQ_DATA_DIR=" + filepath.Join(dir, "data")
	if storeName == "redis" {
		storeEnv = "NQ_REDIS_URL=redis://" + e.redisAddr + "/" + strconv.Itoa(e2eRedisDB)
		if err := flushRedis(ctx, e.redisAddr); err != nil {
			return row, err
		}
	}
	var extra []string
	var pprofAddr string
	if o.pprofDir != "" {
		port, err := freePort()
		if err != nil {
			return row, err
		}
		pprofAddr = "127.0.0.1:" + strconv.Itoa(port)
		extra = append(extra, "NQ_PPROF_ADDR="+pprofAddr)
	}
	nqd, base, err := startNQD(nqdBin, storeEnv, extra...)
	if err != nil {
		return row, err
	}
	defer nqd.stop()
	hc := httpClient(2 * c)
	defer hc.CloseIdleConnections()
	if err := putFlow(ctx, hc, base); err != nil {
		return row, err
	}
	wcmd := exec.Command(o.worker)
	wcmd.Env = append(os.Environ(), "NQD_URL="+base, "NQD_QUEUE="+e2eQueue, "NQD_CONCURRENCY="+strconv.Itoa(c))
	wcmd.Stderr = os.Stderr
	w, err := start(wcmd)
	if err != nil {
		return row, fmt.Errorf("start %s: %w", o.worker, err)
	}
	defer w.stop()

	t := nqdTarget(base)
	name := fmt.Sprintf("e2e %s C=%d", storeName, c)
	// The warm-up opens connections, fills the caches and lets the
	// worker's claims settle into their loop.
	if _, err := closedLoop(ctx, hc, t, c, max(o.runs/10, 2*c), name+" warm-up"); err != nil {
		return row, err
	}
	var prof *profileTaker
	if pprofAddr != "" {
		prof = takeProfiles(ctx, pprofAddr, filepath.Join(o.pprofDir, fmt.Sprintf("%s-c%d-r%d", storeName, c, round)))
	}
	c0 := claimCalls(base)
	n0, _ := cpuSeconds(nqd.pid())
	w0, _ := cpuSeconds(w.pid())
	r0, _ := cpuSeconds(e.redisPID)
	mach := meterMachine()
	m, err := closedLoop(ctx, hc, t, c, o.runs, name)
	machEnd := meterMachine()
	n1, _ := cpuSeconds(nqd.pid())
	w1, _ := cpuSeconds(w.pid())
	r1, _ := cpuSeconds(e.redisPID)
	c1 := claimCalls(base)
	if prof != nil {
		if perr := prof.finish(); perr != nil {
			fmt.Fprintln(os.Stderr, "nqbench: profiles:", perr)
		}
	}
	if err != nil {
		return row, err
	}
	row.measure(m)
	perRun := func(a, b float64) float64 { return (b - a) * 1000 / float64(max(m.runs, 1)) }
	row.CPUms = map[string]float64{"nqd": perRun(n0, n1), "worker": perRun(w0, w1)}
	if storeName == "redis" {
		row.CPUms["redis"] = perRun(r0, r1)
	}
	mach.fill(machEnd, &row, row.cpuAll()*float64(row.Runs)/1000)
	row.ClaimsPerRun = (c1 - c0) / float64(max(m.runs, 1))
	if m.errors > 0 {
		return row, fmt.Errorf("%d of %d runs failed; first: %v", m.errors, m.runs+m.errors, m.firstErr)
	}
	if m.lost > 0 {
		return row, fmt.Errorf("%d of %d runs' streams stalled before showing them done", m.lost, m.runs+m.lost)
	}
	return row, nil
}

// e2eRedisDB is the Redis database the e2e rows use, emptied before each.
const e2eRedisDB = 1

// claimCalls is how many claim calls nqd has answered, from its
// nqd_http_requests_total.
func claimCalls(base string) float64 {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	var n float64
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "nqd_http_requests_total{") && strings.Contains(line, `route="/api/_workers/claim"`) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			n += v
		}
	}
	return n
}

// flushRedis empties the database a row's nqd will use, so that no row
// reads another's runs.
func flushRedis(ctx context.Context, addr string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, DB: e2eRedisDB})
	defer func() { _ = rdb.Close() }()
	return rdb.FlushDB(ctx).Err()
}

func putFlow(ctx context.Context, hc *http.Client, base string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/api/_flows/"+e2eFlow, strings.NewReader(e2eDef))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/yaml")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("store the flow: status %d", resp.StatusCode)
	}
	return nil
}

// target is a system the closed loop drives: where a run starts, where its
// stream is, and what a frame that says the run is done holds.
type target struct {
	start  string
	stream func(runID string) string
	done   []byte
	// stall is how long a stream may go without showing the run done.
	// When it runs out the run is lost: counted, and left out of the
	// rate, rather than failing the row, so that a system under test that
	// sometimes misses a live event is measured at the rate it keeps.
	stall time.Duration
}

// errLost is a run whose stream stalled before showing it done.
var errLost = errors.New("the run's stream stalled before showing it done")

// nqdTarget is nqd's e2e flow, done at its flow.completed.
func nqdTarget(base string) target {
	return target{
		start:  base + "/api/_flows/" + e2eFlow + "/start",
		stream: func(id string) string { return base + "/api/_events/flow/" + id + "/stream" },
		done:   []byte(`"event":"flow.completed"`),
		stall:  30 * time.Second,
	}
}

// loopResult is what one closed loop measured: latencies from each run's
// start request to its start's answer, to the first event frame of its
// stream, and to the frame that says it is done; and the lost runs and the
// time starters spent waiting on their streams.
type loopResult struct {
	runs, errors       int64
	lost               int64
	lostWait           time.Duration
	firstErr           error
	elapsed            time.Duration
	start, first, done *hdrhistogram.Histogram
}

// closedLoop runs n runs of t with c starters, each starting its next run
// as soon as its last one is done on the stream.
func closedLoop(ctx context.Context, hc *http.Client, t target, c, n int, name string) (loopResult, error) {
	var next, ok, failed, lost, lostWait atomic.Int64
	res := loopResult{start: newHist(), first: newHist(), done: newHist()}
	var mu sync.Mutex
	p := newProgress(name, int64(n), func() int64 { return ok.Load() + failed.Load() })
	t0 := time.Now()
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			start, first, done := newHist(), newHist(), newHist()
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				t0 := time.Now()
				s, f, d, err := oneRun(ctx, hc, t)
				if errors.Is(err, errLost) && ctx.Err() == nil {
					lost.Add(1)
					lostWait.Add(int64(time.Since(t0)))
					continue
				}
				if err != nil {
					if failed.Add(1) == 1 {
						mu.Lock()
						res.firstErr = err
						mu.Unlock()
					}
					continue
				}
				ok.Add(1)
				_ = start.RecordValue(max(s.Microseconds(), 1))
				_ = first.RecordValue(max(f.Microseconds(), 1))
				_ = done.RecordValue(max(d.Microseconds(), 1))
			}
			mu.Lock()
			res.start.Merge(start)
			res.first.Merge(first)
			res.done.Merge(done)
			mu.Unlock()
		})
	}
	wg.Wait()
	res.elapsed = time.Since(t0)
	p.done()
	res.runs, res.errors = ok.Load(), failed.Load()
	res.lost, res.lostWait = lost.Load(), time.Duration(lostWait.Load())
	return res, ctx.Err()
}

// oneRun starts a run of t and reads its stream until the run is done.
func oneRun(ctx context.Context, hc *http.Client, t target) (started, first, done time.Duration, err error) {
	t0 := time.Now()
	resp, err := hc.Post(t.start, "application/json", strings.NewReader(`{}`))
	if err != nil {
		return 0, 0, 0, err
	}
	var out struct {
		FlowID string `json:"flowId"`
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, 0, 0, fmt.Errorf("start: status %d", resp.StatusCode)
	}
	if err != nil {
		return 0, 0, 0, err
	}
	started = time.Since(t0)
	sctx, cancel := context.WithTimeout(ctx, t.stall)
	defer cancel()
	req, _ := http.NewRequestWithContext(sctx, http.MethodGet, t.stream(out.FlowID), nil)
	sresp, err := hc.Do(req)
	if err != nil {
		return 0, 0, 0, err
	}
	// The stream stays open after the run is done: closing it unread ends
	// its connection, as a browser leaving the page does.
	defer func() { _ = sresp.Body.Close() }()
	if sresp.StatusCode != http.StatusOK {
		return 0, 0, 0, fmt.Errorf("stream: status %d", sresp.StatusCode)
	}
	br := bufio.NewReaderSize(sresp.Body, 8<<10)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil && sctx.Err() != nil && ctx.Err() == nil {
			return 0, 0, 0, fmt.Errorf("stream of %s: %w", out.FlowID, errLost)
		}
		if err != nil {
			return 0, 0, 0, fmt.Errorf("stream of %s ended before the run was done: %w", out.FlowID, err)
		}
		if !bytes.HasPrefix(line, []byte("data: ")) {
			continue
		}
		if first == 0 {
			first = time.Since(t0)
		}
		if bytes.Contains(line, t.done) {
			return started, first, time.Since(t0), nil
		}
	}
}

// profileSeconds is how long the CPU profile of a row runs, from the start
// of its measured runs; a row of 3,000 runs lasts longer on this machine.
const profileSeconds = 4

// profileTaker fetches a CPU profile of the first profileSeconds of the
// measured runs and an allocation profile at their end from nqd's
// NQ_PPROF_ADDR.
type profileTaker struct {
	addr, prefix string
	cpu          chan error
}

func takeProfiles(ctx context.Context, addr, prefix string) *profileTaker {
	p := &profileTaker{addr: addr, prefix: prefix, cpu: make(chan error, 1)}
	_ = os.MkdirAll(filepath.Dir(prefix), 0o755)
	go func() {
		p.cpu <- fetchTo(ctx, "http://"+addr+"/debug/pprof/profile?seconds="+strconv.Itoa(profileSeconds), prefix+".cpu.pprof")
	}()
	return p
}

// finish waits for the CPU profile and takes the allocation profile (all
// allocations since nqd started, warm-up included).
func (p *profileTaker) finish() error {
	err := <-p.cpu
	return errors.Join(err, fetchTo(context.Background(), "http://"+p.addr+"/debug/pprof/allocs", p.prefix+".allocs.pprof"))
}

func fetchTo(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}

// e2eOpts completes the e2e options from their flags.
func (o options) e2eOpts() e2eOptions {
	e := o.e2e
	for _, f := range strings.Split(o.e2eConc, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			e.conc = append(e.conc, n)
		}
	}
	for _, f := range strings.Split(o.e2eStores, ",") {
		if f = strings.TrimSpace(f); f != "" {
			e.stores = append(e.stores, f)
		}
	}
	e.rounds = max(e.rounds, 1)
	return e
}

// text is the e2e tables printed at the end of a run: every row, then
// each store and concurrency over the rounds.
func (r e2eResult) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "e2e (closed loop, one no-op step; load average %s before, %s after; 4 KB write + fdatasync p50 %.2f ms, p99 %.2f ms):\n", r.LoadBefore, r.LoadAfter, r.SyncP50ms, r.SyncP99ms)
	if r.Node == nil {
		fmt.Fprintf(&b, "  %s: nqd alone\n", r.NoNode)
	}
	for _, x := range r.Rows {
		name := "nqd " + x.Store
		if x.System == sysNode {
			name = "Node original"
		}
		fmt.Fprintf(&b, "  round %d  %-13s C=%-2d %5d runs (%d lost)  %5.0f runs/s  first frame p50 %5.1f p99 %5.1f ms  done p50 %5.1f p99 %5.1f ms  CPU-ms/run %s  machine %.0f%% busy, driver %.2f, others %.2f\n",
			x.Round+1, name, x.Concurrency, x.Runs, x.Lost, x.RunsPerSec, x.FirstP50ms, x.FirstP99ms, x.DoneP50ms, x.DoneP99ms, cpuText(x.CPUms, x.cpuAll()),
			100*x.Busy, x.DriverCPUms, x.OtherCPUms)
	}
	for _, p := range r.Pairs {
		fmt.Fprintf(&b, "  %-8s C=%-2d nqd %5.0f runs/s, CPU-ms/run %.2f", p.Store, p.Concurrency, p.NQD.RunsPerSec, p.NQD.CPUAll)
		if p.Node != nil {
			fmt.Fprintf(&b, "  Node %5.0f runs/s, CPU-ms/run %.2f  nqd ÷ Node: runs/s %.2f×, CPU per run %.2f×",
				p.Node.RunsPerSec, p.Node.CPUAll, safeDiv(p.NQD.RunsPerSec, p.Node.RunsPerSec), safeDiv(p.NQD.CPUAll, p.Node.CPUAll))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// cpuText is CPU-ms per run by process and in all.
func cpuText(m map[string]float64, all float64) string {
	var parts []string
	for _, k := range []string{"nqd", "worker", "node", "redis"} {
		if v, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, v))
		}
	}
	return strings.Join(parts, " + ") + fmt.Sprintf(" = %.2f", all)
}

// section is the e2e part of BENCHMARKS.md.
func (r e2eResult) section() string {
	var b strings.Builder
	b.WriteString("## Flow runs against the Node original (`e2e`)\n\n")
	b.WriteString("C closed-loop starters, each `POST /api/_flows/<flow>/start` and at once the run's event stream (`GET /api/_events/flow/<runId>/stream`), read until the run is done, then the next start. nqd's flow is one step that does nothing, run by `cmd/noop-worker` (the Go worker SDK, concurrency C) in a process of its own, and is done at its `flow.completed`; each nqd row has a fresh nqd and worker. ")
	b.WriteString("The Node original (Nuxt Queue's SSE generation, whose API nqd serves: its production build, BullMQ running the step inside its server, its own redis-server) runs its one-step no-op flow `" + nodeFlow + "`, which is done at the step's `step.completed` (that generation writes no `flow.completed`). ")
	fmt.Fprintf(&b, "Both are driven by the same loop in the same run: every nqd row is measured next to a row of the Node original, %d round(s), the two taking turns at going first, so that both see the same load. Each row measures its runs after a warm-up of a tenth as many. A Node original's stream that has not shown its run done after a second is counted as lost, and the time starters spent waiting on lost streams, over C, is left out of that row's time (the table says how many were lost, if any); nqd's rows allow none. First frame is the first event (`data:`) line of the stream. CPU-ms per run is the user + system time of every process of the system (from /proc) over the measured runs, divided by the runs: nqd, its worker and, on Redis, its redis-server; the Node server and its redis-server. Load average (1, 5, 15 minutes) %s at the start, %s at the end.\n\n", r.Rounds, r.LoadBefore, r.LoadAfter)
	if r.Node == nil {
		fmt.Fprintf(&b, "**This run had no Node original** (%s): nqd alone.\n\n", r.NoNode)
	}
	if r.SyncP50ms > 0 {
		fmt.Fprintf(&b, "A 4 KB write and `fdatasync` in the embedded store's directory took %.2f ms at p50 and %.2f ms at p99 (200 of them as the profile began): an embedded commit syncs twice, and a run waits for two commits (its start and its completion).\n\n", r.SyncP50ms, r.SyncP99ms)
	}
	b.WriteString(r.table())
	b.WriteString("\nThe machine over the same rows: the share of all its cores busy, and the cores used (CPU-seconds per second) by the system's own processes, by the driver (this tool, on the same cores) and by every other process (other work on the machine). Where the cores are fully busy, each system's runs/s is its cores over its CPU per run: bound by the CPU left to it, not by a wait of its own.\n\n")
	b.WriteString(r.machineTable())
	b.WriteString("\n")
	return b.String()
}

// machineTable is, for each pair, how busy the machine was and who used it.
func (r e2eResult) machineTable() string {
	var b strings.Builder
	b.WriteString("| nqd store | C | system | machine busy | cores: system | driver | others | system's CPU-ms per run |\n")
	b.WriteString("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, p := range r.Pairs {
		line := func(name string, x e2eSum) {
			cores := func(msPerRun float64) float64 { return msPerRun * x.RunsPerSec / 1000 }
			fmt.Fprintf(&b, "| %s | %d | %s | %.0f%% | %.2f | %.2f | %.2f | %.2f |\n", p.Store, p.Concurrency, name, 100*x.Busy,
				cores(x.CPUAll), cores(x.DriverCPUms), cores(x.OtherCPUms), x.CPUAll)
		}
		line("nqd", p.NQD)
		if p.Node != nil {
			line("Node original", *p.Node)
		}
	}
	return b.String()
}

// table is the e2e pairs as a Markdown table.
func (r e2eResult) table() string {
	var b strings.Builder
	b.WriteString("| nqd store | C | runs/s nqd · Node | ÷ Node | start → first frame p50 / p99, nqd · Node | start → done p50 / p99, nqd · Node | CPU-ms per run, nqd: nqd + worker (+ redis) | CPU-ms per run, Node: server + redis | ÷ Node |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, p := range r.Pairs {
		n := p.Node
		if n == nil {
			n = &e2eSum{}
		}
		fmt.Fprintf(&b, "| %s | %d | %.0f · %s | %s | %.1f / %.1f · %s ms | %.1f / %.1f · %s ms | %s | %s | %s |\n",
			p.Store, p.Concurrency, p.NQD.RunsPerSec, orNone(p.Node, fmt.Sprintf("%.0f%s", n.RunsPerSec, lostText(n.Lost, n.Runs))),
			orNone(p.Node, fmt.Sprintf("**%.2f×**", safeDiv(p.NQD.RunsPerSec, n.RunsPerSec))),
			p.NQD.FirstP50ms, p.NQD.FirstP99ms, orNone(p.Node, fmt.Sprintf("%.1f / %.1f", n.FirstP50ms, n.FirstP99ms)),
			p.NQD.DoneP50ms, p.NQD.DoneP99ms, orNone(p.Node, fmt.Sprintf("%.1f / %.1f", n.DoneP50ms, n.DoneP99ms)),
			cpuText(p.NQD.CPUms, p.NQD.CPUAll), orNone(p.Node, cpuText(n.CPUms, n.CPUAll)),
			orNone(p.Node, fmt.Sprintf("**%.2f×**", safeDiv(p.NQD.CPUAll, n.CPUAll))))
	}
	return b.String()
}

// lostText says how many of the runs were lost, if any.
func lostText(lost, runs int64) string {
	if lost == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d of %d streams lost)", lost, lost+runs)
}

// orNone is s, or a dash when there is no Node original's figure.
func orNone(n *e2eSum, s string) string {
	if n == nil {
		return "–"
	}
	return s
}
