package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/config"
	"github.com/nqd-dev/nqd/examples/demo"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/sdk/go/worker"
	"github.com/nqd-dev/nqd/wiring"
)

// backends are the stores the e2e tests run nqd on: each backend, and Redis
// Cluster.
var backends = []string{backendtest.Embedded, backendtest.Redis, backendtest.RedisCluster, backendtest.Postgres}

// startServer runs the real wiring with the example flows on 127.0.0.1:0
// until the test ends, and returns its base URL.
func startServer(t testing.TB, args []string) string {
	t.Helper()
	args = append([]string{"-addr", "127.0.0.1:0", "-flows-dir", "../examples/flows", "-rate-per-addr", "0", "-rate-per-token", "0", "-log-level", "warn"}, args...)
	cfg, err := config.Load(args, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	app, err := wiring.New(context.Background(), cfg, testkit.Logger(t).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Serve() }()
	t.Cleanup(func() {
		if err := app.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-done
		if err := app.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return "http://" + app.Addr()
}

// startWorker runs the worker SDK with handlers until the test ends.
func startWorker(t testing.TB, base string, concurrency int, handlers map[string]worker.Handler) {
	t.Helper()
	startWorkerWith(t, worker.Config{BaseURL: base, Concurrency: concurrency}, handlers)
}

// startWorkerWith runs the worker SDK with cfg (queue default) until the
// test ends.
func startWorkerWith(t testing.TB, cfg worker.Config, handlers map[string]worker.Handler) {
	t.Helper()
	cfg.Queues = []string{"default"}
	cfg.Logger = slog.New(slog.NewTextHandler(zerolog.NewTestWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := worker.Run(ctx, cfg, handlers); err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func demoHandlers() map[string]worker.Handler { return demo.Handlers(demo.Options{Epochs: 3}) }

// call sends body (JSON, or nothing when nil) and decodes the answer into
// out, failing the test on any status other than 200.
func call(t testing.TB, method, url string, body, out any) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, url, res.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, url, err, raw)
		}
	}
}

func startRun(t testing.TB, base, flow string, input any) string {
	t.Helper()
	var started struct {
		FlowID string `json:"flowId"`
	}
	call(t, "POST", base+"/api/_flows/"+flow+"/start", input, &started)
	if started.FlowID == "" {
		t.Fatalf("start %s: no flowId", flow)
	}
	return started.FlowID
}

// runsPage is GET /api/_flows/{name}/runs.
type runsPage struct {
	Total int64 `json:"total"`
	Count int   `json:"count"`
	Items []struct {
		ID        string `json:"id"`
		Status    string `json:"status"`
		StartedAt string `json:"startedAt"`
	} `json:"items"`
}

func runs(t testing.TB, base, flow, status string, offset, limit int) runsPage {
	t.Helper()
	var p runsPage
	call(t, "GET", fmt.Sprintf("%s/api/_flows/%s/runs?status=%s&offset=%d&limit=%d", base, flow, status, offset, limit), nil, &p)
	return p
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	wait.For(t, within, 20*time.Millisecond, what, cond)
}

// runEvents is a run's stream as the API serves it, with its reduced state.
type runEvents struct {
	Events []struct {
		Kind string          `json:"kind"`
		Step string          `json:"step"`
		Data json.RawMessage `json:"data"`
	} `json:"events"`
	State json.RawMessage `json:"state"`
}

func events(t testing.TB, base, run string) runEvents {
	t.Helper()
	var out runEvents
	call(t, "GET", base+"/api/_events/flow/"+run, nil, &out)
	return out
}

// kinds names each event as "kind step", with willRetry on step failures.
func (r runEvents) kinds() []string {
	var out []string
	for _, e := range r.Events {
		k := e.Kind
		if e.Step != "" {
			k += " " + e.Step
		}
		if e.Kind == "step.failed" {
			var d struct{ WillRetry bool }
			_ = json.Unmarshal(e.Data, &d)
			k += fmt.Sprintf(" willRetry=%v", d.WillRetry)
		}
		out = append(out, k)
	}
	return out
}

// bySteps splits the kinds of a run's events by step, in stream order; the
// run's own events go under "". Steps that run after an emit may start
// before the emitting step completes, so only each step's own sequence (and
// the run's) is fixed.
func (r runEvents) bySteps() map[string][]string {
	out := map[string][]string{}
	for i, k := range r.kinds() {
		out[r.Events[i].Step] = append(out[r.Events[i].Step], k)
	}
	return out
}

func count(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}
