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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/redis/go-redis/v9"
)

// latencyRow is one measured load: its rate and its latency percentiles.
type latencyRow struct {
	Name       string  `json:"name"`
	TargetRate float64 `json:"target_rate"`
	Achieved   float64 `json:"achieved_rate"`
	OK         int64   `json:"ok"`
	Errors     int64   `json:"errors"`
	P50ms      float64 `json:"p50_ms"`
	P99ms      float64 `json:"p99_ms"`
	P999ms     float64 `json:"p999_ms"`
	MaxMs      float64 `json:"max_ms"`
	CPU        string  `json:"cpu,omitempty"` // cores used by nqd and Redis during the run
}

func row(name string, rate float64, r loadResult) latencyRow {
	return rowOf(name, rate, r.Achieved, r.OK, r.Errors, r.Latency)
}

func rowOf(name string, rate, achieved float64, ok, errs int64, h *hdrhistogram.Histogram) latencyRow {
	ms := func(q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1000 }
	return latencyRow{
		Name: name, TargetRate: rate, Achieved: achieved, OK: ok, Errors: errs,
		P50ms: ms(50), P99ms: ms(99), P999ms: ms(99.9), MaxMs: float64(h.Max()) / 1000,
	}
}

// env is what every profile runs against.
type env struct {
	base      string // nqd's base URL
	redisAddr string
	nqdPID    int
	redisPID  int
	// pgPID is the postmaster's pid when nqd runs on PostgreSQL; the store's
	// cores are then those of the postmaster and its backends.
	pgPID int
}

// cpuMeter measures the cores nqd and its store use over a run.
type cpuMeter struct {
	e          env
	start      time.Time
	nqd, store float64
}

// storeCPU names the store nqd runs on and reads its CPU seconds.
func storeCPU(e env) (string, float64) {
	if e.pgPID != 0 {
		v, _ := treeCPUSeconds(e.pgPID)
		return "postgres", v
	}
	v, _ := cpuSeconds(e.redisPID)
	return "redis", v
}

func meterCPU(e env) *cpuMeter {
	n, _ := cpuSeconds(e.nqdPID)
	_, s := storeCPU(e)
	return &cpuMeter{e: e, start: time.Now(), nqd: n, store: s}
}

// nqdSeconds is the CPU time nqd used since the meter started.
func (m *cpuMeter) nqdSeconds() float64 {
	n, _ := cpuSeconds(m.e.nqdPID)
	return n - m.nqd
}

func (m *cpuMeter) String() string {
	n, _ := cpuSeconds(m.e.nqdPID)
	name, st := storeCPU(m.e)
	s := time.Since(m.start).Seconds()
	return fmt.Sprintf("nqd %.2f, %s %.2f", (n-m.nqd)/s, name, (st-m.store)/s)
}

// httpClient returns a client that keeps up to conns connections to nqd.
func httpClient(conns int) *http.Client {
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, IdleConnTimeout: time.Minute}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// warmUp is how long a load runs unrecorded before it is measured.
const warmUp = 2 * time.Second

// pad fills events to about 256 bytes on the wire, the event size the
// performance targets assume.
var pad = strings.Repeat("x", 180)

// appendsResult compares HTTP appends through nqd with the same writes made
// straight to Redis.
type appendsResult struct {
	Concurrency int        `json:"concurrency"`
	Contexts    int        `json:"contexts"`
	NQD         latencyRow `json:"nqd"`
	Baseline    latencyRow `json:"baseline"`
	// P99Ratio is nqd's p99 over the baseline's; ThroughputRatio is nqd's
	// achieved rate over the baseline's at the same offered rate.
	P99Ratio        float64 `json:"p99_ratio"`
	P50Ratio        float64 `json:"p50_ratio"`
	ThroughputRatio float64 `json:"throughput_ratio"`
	// BareHTTP is the same requests answered by a server that does
	// nothing (bare.go); the CPU per request of each server is beside it.
	BareHTTP            latencyRow `json:"bare_http"`
	NQDCPUPerAppendUs   float64    `json:"nqd_cpu_per_append_us"`
	BareCPUPerRequestUs float64    `json:"bare_http_cpu_per_request_us"`
}

// measureNQDAppends offers rate appends/s for d to nqd over HTTP, one
// padded log event each, spread over contexts, after a warm-up: the nqd
// side of the appends profiles on every store, with the load's counts and
// nqd's CPU seconds per successful append.
func measureNQDAppends(ctx context.Context, e env, profile string, rate float64, d time.Duration, conns, contexts int) (latencyRow, loadResult, float64) {
	nqdAppend := appendPoster(httpClient(conns), e.base, contexts)
	openLoop(ctx, profile+" nqd warm-up", rate, warmUp, conns, nqdAppend)
	cpu := meterCPU(e)
	r := openLoop(ctx, profile+" nqd", rate, d, conns, nqdAppend)
	out := row("nqd HTTP append", rate, r)
	out.CPU = cpu.String()
	return out, r, cpu.nqdSeconds() / float64(max(r.OK, 1))
}

// appendPoster returns the appends profiles' operation: POST one padded log
// event to base's event API, in context a<seq mod contexts>, expecting 201.
func appendPoster(hc *http.Client, base string, contexts int) func(context.Context, int64, time.Time) error {
	body := []byte(`{"kind":"log","data":{"pad":"` + pad + `"}}`)
	return func(ctx context.Context, seq int64, _ time.Time) error {
		u := base + "/api/_events/bench/a" + strconv.FormatInt(seq%int64(contexts), 10)
		resp, err := hc.Post(u, "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
}

// runAppends offers rate appends/s for d to nqd over HTTP, then the same
// rate of pipelined XADD + PUBLISH (no Lua) to the same Redis from the same
// process with the same concurrency.
func runAppends(ctx context.Context, e env, rate float64, d time.Duration, conns, contexts int) (appendsResult, error) {
	res := appendsResult{Concurrency: conns, Contexts: contexts}
	// A warm-up opens the connections and loads the script, which a
	// server that has run a while has done long ago.
	nqd, r, perAppend := measureNQDAppends(ctx, e, "appends", rate, d, conns, contexts)
	res.NQD = nqd
	res.NQDCPUPerAppendUs = perAppend * 1e6

	rdb := redis.NewClient(&redis.Options{Addr: e.redisAddr, PoolSize: conns, MaxRetries: -1})
	defer func() { _ = rdb.Close() }()
	record := `{"kind":"log","data":{"pad":"` + pad + `"}}`
	baseline := func(ctx context.Context, seq int64, _ time.Time) error {
		key := "nqbench:bench:a" + strconv.FormatInt(seq%int64(contexts), 10)
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: "*", Values: []any{"e", record}})
			p.Publish(ctx, key+":live", record)
			return nil
		})
		return err
	}
	openLoop(ctx, "appends baseline warm-up", rate, warmUp, conns, baseline)
	cpu := meterCPU(e)
	b := openLoop(ctx, "appends baseline", rate, d, conns, baseline)
	res.Baseline = row("Redis XADD+PUBLISH", rate, b)
	res.Baseline.CPU = cpu.String()
	res.P50Ratio = safeDiv(res.NQD.P50ms, res.Baseline.P50ms)
	res.P99Ratio = safeDiv(res.NQD.P99ms, res.Baseline.P99ms)
	res.ThroughputRatio = safeDiv(res.NQD.Achieved, res.Baseline.Achieved)
	if r.Errors > 0 {
		return res, fmt.Errorf("%d of %d appends failed", r.Errors, r.Sent)
	}
	bare, perRequest, err := measureBareHTTP(ctx, rate, d, conns, contexts)
	res.BareHTTP = bare
	res.BareCPUPerRequestUs = perRequest * 1e6
	return res, err
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// fanoutResult is append-to-receive latency over many subscribers, and the
// checker's verdict.
type fanoutResult struct {
	Contexts    int        `json:"contexts"`
	Subscribers int        `json:"subscribers_per_context"`
	Appends     latencyRow `json:"appends"`
	Delivery    latencyRow `json:"delivery"`
	Deliveries  int64      `json:"deliveries"`
	Expected    int64      `json:"expected_deliveries"`
	Missing     int64      `json:"missing"`
	Duplicates  int64      `json:"duplicates"`
	Reordered   int64      `json:"reordered"`
	Unexpected  int64      `json:"unexpected"`
}

// subscriber is one SSE client of the fan-out profile.
type subscriber struct {
	ctx  int
	ids  []string
	hist *hdrhistogram.Histogram
	n    atomic.Int64
}

// runFanout opens contexts × subs live-only streams, offers rate appends/s
// spread over the contexts for d, and checks that every client got every
// acknowledged id of its context once, in order.
func runFanout(ctx context.Context, e env, rate float64, d time.Duration, contexts, subs, conns int) (fanoutResult, error) {
	res := fanoutResult{Contexts: contexts, Subscribers: subs}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	ctxURL := func(i int) string { return e.base + "/api/_events/fanout/" + run + "-" + strconv.Itoa(i) }

	var clients []*subscriber
	var wg sync.WaitGroup
	ready := make(chan error, contexts*subs)
	for i := range contexts {
		for range subs {
			s := &subscriber{ctx: i, hist: newHist()}
			clients = append(clients, s)
			wg.Go(func() { s.read(sctx, ctxURL(i)+"/stream?backfill=0", ready) })
		}
	}
	for range clients {
		if err := <-ready; err != nil {
			return res, fmt.Errorf("open a stream: %w", err)
		}
	}

	hc := httpClient(conns)
	var mu sync.Mutex
	acked := make([][]string, contexts)
	cpu := meterCPU(e)
	r := openLoop(ctx, "fan-out", rate, d, conns, func(ctx context.Context, seq int64, intended time.Time) error {
		i := int(seq % int64(contexts))
		body := fmt.Sprintf(`{"kind":"log","data":{"t":%d,"pad":"%s"}}`, intended.UnixNano(), pad)
		resp, err := hc.Post(ctxURL(i), "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		var ev struct {
			ID string `json:"id"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&ev); err != nil {
			return err
		}
		mu.Lock()
		acked[i] = append(acked[i], ev.ID)
		mu.Unlock()
		return nil
	})
	res.Appends = row("appends", rate, r)
	for i := range acked {
		slices.SortFunc(acked[i], compareIDs)
		res.Expected += int64(len(acked[i]) * subs)
	}
	// Every acknowledged event is on its way; wait for the stragglers, but
	// not forever.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var got int64
		for _, c := range clients {
			got += c.n.Load()
		}
		if got >= res.Expected {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	res.Delivery.CPU = cpu.String()
	cancel()
	wg.Wait()

	h := newHist()
	for _, c := range clients {
		h.Merge(c.hist)
		res.Deliveries += int64(len(c.ids))
		checkOrder(&res, c.ids, acked[c.ctx])
	}
	cpuStr := res.Delivery.CPU
	res.Delivery = rowOf("append → receive", rate*float64(subs), float64(res.Deliveries)/r.Elapsed.Seconds(), res.Deliveries, 0, h)
	res.Delivery.CPU = cpuStr
	if res.Missing+res.Duplicates+res.Reordered+res.Unexpected > 0 {
		return res, fmt.Errorf("checker: %d missing, %d duplicates, %d reordered, %d unexpected", res.Missing, res.Duplicates, res.Reordered, res.Unexpected)
	}
	return res, nil
}

// checkOrder compares what a client received with what was acknowledged.
func checkOrder(res *fanoutResult, got, want []string) {
	seen := map[string]bool{}
	wanted := map[string]bool{}
	for _, id := range want {
		wanted[id] = true
	}
	prev := ""
	for _, id := range got {
		switch {
		case seen[id]:
			res.Duplicates++
			continue
		case !wanted[id]:
			res.Unexpected++
		}
		if prev != "" && compareIDs(id, prev) < 0 {
			res.Reordered++
		}
		seen[id] = true
		prev = id
	}
	for _, id := range want {
		if !seen[id] {
			res.Missing++
		}
	}
}

func compareIDs(a, b string) int {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	x, _ := strconv.ParseUint(am, 10, 64)
	y, _ := strconv.ParseUint(bm, 10, 64)
	if x != y {
		if x < y {
			return -1
		}
		return 1
	}
	p, _ := strconv.ParseUint(as, 10, 64)
	q, _ := strconv.ParseUint(bs, 10, 64)
	switch {
	case p < q:
		return -1
	case p > q:
		return 1
	}
	return 0
}

// read streams until ctx ends, recording each event's id and its latency
// from the append's intended send time carried in the event.
func (s *subscriber) read(ctx context.Context, url string, ready chan<- error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
		_ = resp.Body.Close()
	}
	if err != nil {
		ready <- err
		return
	}
	defer func() { _ = resp.Body.Close() }()
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	signalled := false
	var id string
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if !signalled {
				ready <- errors.New("the stream ended before its first line")
			}
			return
		}
		if !signalled {
			ready <- nil // the first comment: the stream is live
			signalled = true
		}
		switch {
		case bytes.HasPrefix(line, []byte("id: ")):
			id = string(bytes.TrimSpace(line[4:]))
		case bytes.HasPrefix(line, []byte("data: ")):
			now := time.Now()
			if i := bytes.Index(line, []byte(`"t":`)); i >= 0 && s.hist != nil {
				rest := line[i+4:]
				j := bytes.IndexAny(rest, ",}")
				if t, err := strconv.ParseInt(string(rest[:max(j, 0)]), 10, 64); err == nil {
					_ = s.hist.RecordValue(max(now.Sub(time.Unix(0, t)).Microseconds(), 1))
				}
			}
			s.ids = append(s.ids, id)
			s.n.Add(1)
		}
	}
}

// idleResult is the memory idle streams hold in nqd.
type idleResult struct {
	Connections   int     `json:"connections"`
	Contexts      int     `json:"contexts"`
	RSSBefore     int64   `json:"rss_before_bytes"`
	RSSAfter      int64   `json:"rss_after_bytes"`
	RSSPerConn    float64 `json:"rss_per_connection_bytes"`
	HeapPerConn   float64 `json:"heap_per_connection_bytes"`
	GoroutinesPer float64 `json:"goroutines_per_connection"`
	OpenTime      float64 `json:"open_seconds"`
	// Instances are the nqd instances' shares when the streams were spread
	// over several (-idle-instances); the figures above are then over all.
	Instances []idleInstance `json:"instances,omitempty"`
}

// runIdle holds n live-only streams over n/perContext contexts and reads
// nqd's RSS, heap and goroutines before and after.
func runIdle(ctx context.Context, e env, n, perContext int) (idleResult, error) {
	res := idleResult{Connections: n, Contexts: max(n/perContext, 1)}
	heap0, gr0, err := scrapeRuntime(e.base)
	if err != nil {
		return res, err
	}
	if res.RSSBefore, err = rssBytes(e.nqdPID); err != nil {
		return res, err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	ready := make(chan error, n)
	var wg sync.WaitGroup
	start := time.Now()
	p := newProgress("idle connections", int64(n), func() int64 { return int64(len(ready)) })
	sem := make(chan struct{}, clientConnects) // connects in flight
	for i := range n {
		sem <- struct{}{}
		url := fmt.Sprintf("%s/api/_events/idle/%s-%d/stream?backfill=0", e.base, run, i%res.Contexts)
		wg.Go(func() {
			s := &subscriber{}
			mine := make(chan error, 1)
			go func() {
				err := <-mine
				<-sem
				ready <- err
			}()
			s.read(sctx, url, mine)
		})
	}
	var failed int
	for range n {
		if err := <-ready; err != nil {
			failed++
		}
	}
	p.done()
	res.OpenTime = time.Since(start).Seconds()
	if failed > 0 {
		cancel()
		wg.Wait()
		return res, fmt.Errorf("%d of %d streams failed to open", failed, n)
	}
	heap1, gr1, err := scrapeRuntime(e.base)
	if err != nil {
		return res, err
	}
	if res.RSSAfter, err = rssBytes(e.nqdPID); err != nil {
		return res, err
	}
	res.RSSPerConn = float64(res.RSSAfter-res.RSSBefore) / float64(n)
	res.HeapPerConn = (heap1 - heap0) / float64(n)
	res.GoroutinesPer = (gr1 - gr0) / float64(n)
	cancel()
	wg.Wait()
	return res, nil
}

// scrapeRuntime reads nqd's heap in use and goroutine count from /metrics.
func scrapeRuntime(base string) (heap, goroutines float64, err error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(string(b)) {
		name, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		f, _ := strconv.ParseFloat(v, 64)
		switch name {
		case "go_memstats_heap_inuse_bytes":
			heap = f
		case "go_goroutines":
			goroutines = f
		}
	}
	return heap, goroutines, nil
}
