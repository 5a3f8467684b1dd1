package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// fakeNode serves the part of the Node original's API the e2e driver uses,
// with its frames as it writes them: replayed ones name the kind in
// "event", live ones only in the record's type. A run's stream replays
// flow.start and then sends step.completed live, unless stall is set, when
// it sends nothing more.
func fakeNode(t *testing.T, stall bool) *httptest.Server {
	t.Helper()
	var runs atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/_flows", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `[{"id":"bench-noop"}]`)
	})
	mux.HandleFunc("POST /api/_flows/bench-noop/start", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"id":"1","queue":"bench","step":"noop","flowId":"run-%d"}`, runs.Add(1))
	})
	mux.HandleFunc("GET /api/_events/flow/{id}/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"v\":1,\"event\":\"flow.start\",\"record\":{\"type\":\"flow.start\",\"runId\":%q}}\n\n", r.PathValue("id"))
		w.(http.Flusher).Flush()
		if !stall {
			fmt.Fprintf(w, "data: {\"v\":1,\"record\":{\"type\":\"step.completed\",\"runId\":%q,\"stepName\":\"noop\"}}\n\n", r.PathValue("id"))
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func writeEnv(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bench.env")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestNodeFromEnvFile(t *testing.T) {
	srv := fakeNode(t, false)
	pid := strconv.Itoa(os.Getpid())
	n, why := nodeFlags{envFile: writeEnv(t, "NODE_URL="+srv.URL+"/\nREDIS_PORT=1\nSERVER_PID="+pid+"\nREDIS_PID="+pid+"\n")}.resolve()
	if n == nil {
		t.Fatalf("resolve: none: %s", why)
	}
	if n.URL != srv.URL || len(n.PIDs) != 2 {
		t.Errorf("resolve = %+v, want URL %s and two process ids", n, srv.URL)
	}
}

func TestNoNodeSaysWhy(t *testing.T) {
	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()
	pid := strconv.Itoa(os.Getpid())
	for name, f := range map[string]nodeFlags{
		"nothing given":    {},
		"no such env file": {envFile: filepath.Join(t.TempDir(), "missing.env")},
		"no process ids":   {url: fakeNode(t, false).URL},
		"not running":      {url: fakeNode(t, false).URL, pids: "999999999"},
		"not the original": {url: other.URL, pids: pid},
	} {
		if n, why := f.resolve(); n != nil || why == "" {
			t.Errorf("%s: resolve = %+v, %q; want none and a reason", name, n, why)
		}
	}
}

func TestClosedLoopOnNodeFrames(t *testing.T) {
	n := &nodeOriginal{URL: fakeNode(t, false).URL}
	hc := httpClient(4)
	defer hc.CloseIdleConnections()
	m, err := closedLoop(t.Context(), hc, n.target(), 4, 40, "test")
	if err != nil {
		t.Fatal(err)
	}
	if m.runs != 40 || m.errors != 0 || m.lost != 0 {
		t.Errorf("runs %d, errors %d (first %v), lost %d; want 40, 0, 0", m.runs, m.errors, m.firstErr, m.lost)
	}
}

func TestStalledStreamIsLost(t *testing.T) {
	n := &nodeOriginal{URL: fakeNode(t, true).URL}
	tg := n.target()
	tg.stall = 50 * time.Millisecond
	hc := httpClient(2)
	defer hc.CloseIdleConnections()
	m, err := closedLoop(t.Context(), hc, tg, 2, 4, "test")
	if err != nil {
		t.Fatal(err)
	}
	if m.runs != 0 || m.errors != 0 || m.lost != 4 || m.lostWait <= 0 {
		t.Errorf("runs %d, errors %d (first %v), lost %d, waited %v; want 0, 0, 4, some", m.runs, m.errors, m.firstErr, m.lost, m.lostWait)
	}
	row := e2eRow{Concurrency: 2}
	row.measure(m)
	if row.Lost != 4 || !strings.Contains(lostText(row.Lost, row.Runs), "4 of 4") {
		t.Errorf("row lost %d, text %q", row.Lost, lostText(row.Lost, row.Runs))
	}
}

func TestPairsAndRatios(t *testing.T) {
	hist := func(ms ...int64) *hdrhistogram.Histogram {
		h := newHist()
		for _, v := range ms {
			_ = h.RecordValue(v * 1000)
		}
		return h
	}
	r := e2eResult{Node: &nodeOriginal{URL: "http://node"}, Rounds: 2, Rows: []e2eRow{
		{System: sysNQD, Store: "redis", Concurrency: 8, Runs: 300, Seconds: 1, CPUms: map[string]float64{"nqd": 1, "worker": 0.5, "redis": 0.5}, first: hist(1), done: hist(2)},
		{System: sysNode, Store: "redis", Concurrency: 8, Runs: 100, Seconds: 1, CPUms: map[string]float64{"node": 5, "redis": 1}, first: hist(3), done: hist(4)},
		{System: sysNQD, Store: "redis", Concurrency: 8, Runs: 300, Seconds: 2, CPUms: map[string]float64{"nqd": 1, "worker": 0.5, "redis": 0.5}, first: hist(1), done: hist(2)},
		{System: sysNode, Store: "redis", Concurrency: 8, Runs: 100, Seconds: 1, CPUms: map[string]float64{"node": 5, "redis": 1}, first: hist(3), done: hist(4)},
	}}.summed()
	if len(r.Pairs) != 1 || r.Pairs[0].Node == nil {
		t.Fatalf("pairs = %+v, want one with the Node original", r.Pairs)
	}
	p := r.Pairs[0]
	if p.NQD.Runs != 600 || p.NQD.RunsPerSec != 200 || p.Node.RunsPerSec != 100 || p.NQD.CPUAll != 2 || p.Node.CPUAll != 6 {
		t.Errorf("pair = nqd %+v, Node %+v; want 600 runs at 200/s and 2 CPU-ms, 100/s and 6", p.NQD, *p.Node)
	}
	if tab := r.table(); !strings.Contains(tab, "**2.00×**") || !strings.Contains(tab, "**0.33×**") {
		t.Errorf("table has not the ratios 2.00× and 0.33×:\n%s", tab)
	}
}
