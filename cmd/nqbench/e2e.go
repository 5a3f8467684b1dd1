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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/redis/go-redis/v9"
)

// The e2e profile drives whole flow runs the way an application does: C
// closed-loop starters, each posting a start and reading the new run's
// event stream until flow.completed, then starting the next. The flow is one
// step that does nothing, served by cmd/noop-worker (the Go worker SDK) in
// a process of its own, so what is measured is nqd's path per run: the
// start, a claim, the step's completion, and the stream.

// e2eFlow is the one-step flow the profile stores, and its queue.
const (
	e2eFlow  = "e2e-noop"
	e2eQueue = "e2e"
	e2eDef   = "entry: noop\nsteps:\n  noop: {queue: " + e2eQueue + "}\n"
)

// nodeE2E are the Node original's figures at the same load (production
// build, BullMQ running the step inside its server, its own Redis), measured
// 2026-11-26 on the same machine kind with the same closed-loop driver: 3 ×
// 3,000 runs, alternating with nqd. CPU per run counts all its processes.
var nodeE2E = map[int]struct {
	RunsPerSec, FirstFrameP50 float64
}{8: {601, 11.8}, 32: {644, 12.5}}

// nodeCPUPerRun is the Node original's CPU-ms per run over all its
// processes, the range over the four measurements.
const nodeCPUPerRun = "1.9–2.2"

// e2eRow is one measurement: a store, a concurrency, many runs.
type e2eRow struct {
	Store       string  `json:"store"`
	Concurrency int     `json:"concurrency"`
	Runs        int64   `json:"runs"`
	Errors      int64   `json:"errors"`
	RunsPerSec  float64 `json:"runs_per_sec"`
	FirstP50ms  float64 `json:"first_frame_p50_ms"`
	FirstP99ms  float64 `json:"first_frame_p99_ms"`
	DoneP50ms   float64 `json:"completed_p50_ms"`
	DoneP99ms   float64 `json:"completed_p99_ms"`
	StartP50ms  float64 `json:"start_p50_ms"`
	NQDCPUms    float64 `json:"nqd_cpu_ms_per_run"`
	WorkerCPUms float64 `json:"worker_cpu_ms_per_run"`
	RedisCPUms  float64 `json:"redis_cpu_ms_per_run,omitempty"`
	// ClaimsPerRun is the worker's claim calls over the runs, from nqd's
	// own request counter.
	ClaimsPerRun float64 `json:"claims_per_run"`
	// NodeRunsPerSec and NodeFirstP50ms are the Node original's at C.
	NodeRunsPerSec float64 `json:"node_runs_per_sec"`
	NodeFirstP50ms float64 `json:"node_first_frame_p50_ms"`
}

// e2eResult is the whole profile.
type e2eResult struct {
	Rows []e2eRow `json:"rows"`
}

// e2eOptions are the profile's flags.
type e2eOptions struct {
	worker   string // the noop-worker binary
	runs     int    // measured runs per row
	conc     []int
	stores   []string
	rounds   int
	pprofDir string // where nqd's CPU and allocation profiles go; empty takes none
}

// runE2E measures every store × concurrency, rounds times, alternating, each
// row on a fresh nqd and worker. Redis rows use the tool's redis-server;
// embedded rows a fresh data directory under dir.
func runE2E(ctx context.Context, e env, dir string, nqdBin string, o e2eOptions) (e2eResult, error) {
	var res e2eResult
	for round := range o.rounds {
		for _, c := range o.conc {
			for _, st := range o.stores {
				if ctx.Err() != nil {
					return res, ctx.Err()
				}
				row, err := e2eOnce(ctx, e, filepath.Join(dir, fmt.Sprintf("e2e-%s-%d-%d", st, c, round)), nqdBin, st, c, o)
				if err != nil {
					return res, fmt.Errorf("%s C=%d: %w", st, c, err)
				}
				res.Rows = append(res.Rows, row)
			}
		}
	}
	return res, nil
}

func e2eOnce(ctx context.Context, e env, dir, nqdBin, storeName string, c int, o e2eOptions) (e2eRow, error) {
	row := e2eRow{Store: storeName, Concurrency: c, NodeRunsPerSec: nodeE2E[c].RunsPerSec, NodeFirstP50ms: nodeE2E[c].FirstFrameP50}
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

	name := fmt.Sprintf("e2e %s C=%d", storeName, c)
	// The warm-up opens connections, fills the caches and lets the
	// worker's claims settle into their loop.
	if _, err := closedLoop(ctx, hc, base, c, max(o.runs/10, 2*c), name+" warm-up"); err != nil {
		return row, err
	}
	var prof *profileTaker
	if pprofAddr != "" {
		prof = takeProfiles(ctx, pprofAddr, filepath.Join(o.pprofDir, fmt.Sprintf("%s-c%d", storeName, c)))
	}
	c0 := claimCalls(base)
	n0, _ := cpuSeconds(nqd.pid())
	w0, _ := cpuSeconds(w.pid())
	r0, _ := cpuSeconds(e.redisPID)
	m, err := closedLoop(ctx, hc, base, c, o.runs, name)
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
	ms := func(h *hdrhistogram.Histogram, q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1000 }
	row.Runs, row.Errors = m.runs, m.errors
	row.RunsPerSec = float64(m.runs) / m.elapsed.Seconds()
	row.FirstP50ms, row.FirstP99ms = ms(m.first, 50), ms(m.first, 99)
	row.DoneP50ms, row.DoneP99ms = ms(m.done, 50), ms(m.done, 99)
	row.StartP50ms = ms(m.start, 50)
	perRun := func(a, b float64) float64 { return (b - a) * 1000 / float64(max(m.runs, 1)) }
	row.NQDCPUms, row.WorkerCPUms = perRun(n0, n1), perRun(w0, w1)
	row.ClaimsPerRun = (c1 - c0) / float64(max(m.runs, 1))
	if storeName == "redis" {
		row.RedisCPUms = perRun(r0, r1)
	}
	if m.errors > 0 {
		return row, fmt.Errorf("%d of %d runs failed; first: %v", m.errors, m.runs+m.errors, m.firstErr)
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

// loopResult is what one closed loop measured: latencies from each run's
// start request to its start's answer, to the first event frame of its
// stream, and to flow.completed on the stream.
type loopResult struct {
	runs, errors       int64
	firstErr           error
	elapsed            time.Duration
	start, first, done *hdrhistogram.Histogram
}

// closedLoop runs n runs with c starters, each starting its next run as soon
// as its last one completed on the stream.
func closedLoop(ctx context.Context, hc *http.Client, base string, c, n int, name string) (loopResult, error) {
	var next, ok, failed atomic.Int64
	res := loopResult{start: newHist(), first: newHist(), done: newHist()}
	var mu sync.Mutex
	p := newProgress(name, int64(n), func() int64 { return ok.Load() + failed.Load() })
	t0 := time.Now()
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			start, first, done := newHist(), newHist(), newHist()
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				s, f, d, err := oneRun(ctx, hc, base)
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
	return res, ctx.Err()
}

// oneRun starts a run and reads its stream until flow.completed.
func oneRun(ctx context.Context, hc *http.Client, base string) (started, first, done time.Duration, err error) {
	t0 := time.Now()
	resp, err := hc.Post(base+"/api/_flows/"+e2eFlow+"/start", "application/json", strings.NewReader(`{}`))
	if err != nil {
		return 0, 0, 0, err
	}
	var out struct {
		FlowID string `json:"flowId"`
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, 0, fmt.Errorf("start: status %d", resp.StatusCode)
	}
	if err != nil {
		return 0, 0, 0, err
	}
	started = time.Since(t0)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(sctx, http.MethodGet, base+"/api/_events/flow/"+out.FlowID+"/stream", nil)
	sresp, err := hc.Do(req)
	if err != nil {
		return 0, 0, 0, err
	}
	// The stream stays open after flow.completed: closing it unread ends
	// its connection, as a browser leaving the page does.
	defer func() { _ = sresp.Body.Close() }()
	if sresp.StatusCode != http.StatusOK {
		return 0, 0, 0, fmt.Errorf("stream: status %d", sresp.StatusCode)
	}
	br := bufio.NewReaderSize(sresp.Body, 8<<10)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, 0, 0, fmt.Errorf("stream of %s ended before flow.completed: %w", out.FlowID, err)
		}
		if !bytes.HasPrefix(line, []byte("data: ")) {
			continue
		}
		if first == 0 {
			first = time.Since(t0)
		}
		if bytes.Contains(line, []byte(`"event":"flow.completed"`)) {
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

// text is the e2e table printed at the end of a run.
func (r e2eResult) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "e2e (closed loop, one no-op step, worker in its own process; Node original's figures in brackets):\n")
	for _, x := range r.Rows {
		fmt.Fprintf(&b, "  %-8s C=%-2d %5d runs  %4.0f runs/s [%3.0f]  first frame p50 %5.1f [%4.1f] p99 %5.1f ms  completed p50 %5.1f p99 %5.1f ms  CPU-ms/run nqd %.2f worker %.2f redis %.2f [all %s]  claims/run %.2f\n",
			x.Store, x.Concurrency, x.Runs, x.RunsPerSec, x.NodeRunsPerSec, x.FirstP50ms, x.NodeFirstP50ms, x.FirstP99ms,
			x.DoneP50ms, x.DoneP99ms, x.NQDCPUms, x.WorkerCPUms, x.RedisCPUms, nodeCPUPerRun, x.ClaimsPerRun)
	}
	return b.String()
}

// section is the e2e part of BENCHMARKS.md.
func (r e2eResult) section() string {
	var b strings.Builder
	b.WriteString("## Flow runs against the Node original (`e2e`)\n\n")
	b.WriteString("C closed-loop starters, each `POST /api/_flows/" + e2eFlow + "/start` and at once the run's event stream (`GET /api/_events/flow/<runId>/stream`), read until `flow.completed`, then the next start. The flow is one step that does nothing, run by `cmd/noop-worker` (the Go worker SDK, concurrency C) in a process of its own; each row has a fresh nqd and worker, and measures its runs after a warm-up of a tenth as many. First frame is the first event (`data:`) line of the stream. CPU-ms per run is each process's user + system time over the measured runs (from /proc) divided by the runs. The Node original's figures (production build, BullMQ running the step inside its server, its own Redis; same driver, 3 × 3,000 runs alternating with nqd, measured 2026-11-26 on the same machine kind) are in brackets; its CPU per run counts all its processes.\n\n")
	b.WriteString(r.table())
	b.WriteString("\n")
	return b.String()
}

// table is the e2e rows as a Markdown table.
func (r e2eResult) table() string {
	var b strings.Builder
	b.WriteString("| store | C | runs | runs/s (Node) | ÷ Node | start → first frame p50 / p99 (Node p50) | start → completed p50 / p99 | CPU-ms per run: nqd + worker (+ redis) = all (Node all) |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, x := range r.Rows {
		all := x.NQDCPUms + x.WorkerCPUms + x.RedisCPUms
		cpu := fmt.Sprintf("%.2f + %.2f", x.NQDCPUms, x.WorkerCPUms)
		if x.Store == "redis" {
			cpu += fmt.Sprintf(" + %.2f", x.RedisCPUms)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %.0f (%.0f) | %.2f× | %.1f / %.1f ms (%.1f) | %.1f / %.1f ms | %s = %.2f (%s) |\n",
			x.Store, x.Concurrency, x.Runs, x.RunsPerSec, x.NodeRunsPerSec, safeDiv(x.RunsPerSec, x.NodeRunsPerSec),
			x.FirstP50ms, x.FirstP99ms, x.NodeFirstP50ms, x.DoneP50ms, x.DoneP99ms, cpu, all, nodeCPUPerRun)
	}
	return b.String()
}
