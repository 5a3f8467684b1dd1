package wiring

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/sdk/go/worker"
)

// Flows of TestEngineMetrics: metered retries its first step once, doomed
// fails for good, idle waits on a queue no worker takes and is cancelled.
var meteredFlows = map[string]string{
	"metered.yaml": `entry: first
steps:
  first: {queue: default, emits: [first.done], retryPolicy: {attempts: 2, backoff: {type: fixed, delayMs: 20}}}
  second: {queue: default, subscribes: [first.done]}
`,
	"doomed.yaml": `entry: boom
steps:
  boom: {queue: default}
`,
	"idle.yaml": `entry: wait
steps:
  wait: {queue: nobody}
`,
}

// TestEngineMetrics runs flows through the real wiring and a worker, and
// reads their lifecycle in the engine series, and every event the engine and
// the worker wrote in nqd_appended_events_total.
func TestEngineMetrics(t *testing.T) {
	dir := t.TempDir()
	for name, body := range meteredFlows {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig(t)
	cfg.FlowsDir = dir
	base, _ := mustStartApp(t, cfg)

	ctx, cancel := context.WithCancel(context.Background())
	var workerDone sync.WaitGroup
	workerDone.Go(func() {
		_ = worker.Run(ctx, worker.Config{BaseURL: base, Queues: []string{"default"}, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))},
			map[string]worker.Handler{
				"first": func(_ context.Context, sc *worker.StepContext) (any, error) {
					if sc.Attempt() == 1 {
						return nil, errors.New("flaky")
					}
					return nil, sc.Emit("first.done", map[string]int{"n": 1})
				},
				"second": func(context.Context, *worker.StepContext) (any, error) { return "ok", nil },
				"boom": func(context.Context, *worker.StepContext) (any, error) {
					return nil, worker.Permanent(errors.New("broken for good"))
				},
			})
	})
	t.Cleanup(func() { cancel(); workerDone.Wait() })

	runs := map[string]string{}
	for _, flow := range []string{"metered", "doomed", "idle"} {
		code, body := do(t, "POST", base+"/api/_flows/"+flow+"/start", `{}`)
		if code != http.StatusOK {
			t.Fatalf("start %s: %d %v", flow, code, body)
		}
		runs[flow], _ = body["flowId"].(string)
	}
	if code, body := do(t, "POST", base+"/api/_flows/idle/runs/"+runs["idle"]+"/cancel", `{}`); code != http.StatusOK {
		t.Fatalf("cancel: %d %v", code, body)
	}
	wait.For(t, 30*time.Second, 20*time.Millisecond, "every run ended", func() bool {
		m := scrapeApp(t, base)
		return strings.Contains(m, `nqd_engine_runs_ended_total{flow="metered",status="completed"} 1`) &&
			strings.Contains(m, `nqd_engine_runs_ended_total{flow="doomed",status="failed"} 1`)
	})

	stored := 0
	for _, id := range runs {
		code, body := do(t, "GET", base+"/api/_events/flow/"+id+"?limit=1000", "")
		evs, _ := body["events"].([]any)
		if code != http.StatusOK || len(evs) == 0 {
			t.Fatalf("read run %s: %d, %d events", id, code, len(evs))
		}
		stored += len(evs)
	}
	// The worker's arrival in the worker registry is stored too.
	code, body := do(t, "GET", base+"/api/_events/registry/workers", "")
	if n, _ := body["eventCount"].(float64); code != http.StatusOK || n < 1 {
		t.Fatalf("read the worker registry: %d, %v events", code, body["eventCount"])
	} else {
		stored += int(n)
	}
	m := scrapeApp(t, base)
	for _, line := range []string{
		// Every event the engine and the worker wrote; nothing came through the append route.
		"nqd_appended_events_total " + strconv.Itoa(stored),
		`nqd_engine_runs_started_total{flow="metered"} 1`,
		`nqd_engine_runs_started_total{flow="doomed"} 1`,
		`nqd_engine_runs_started_total{flow="idle"} 1`,
		`nqd_engine_runs_ended_total{flow="metered",status="completed"} 1`,
		`nqd_engine_runs_ended_total{flow="doomed",status="failed"} 1`,
		`nqd_engine_runs_ended_total{flow="idle",status="cancelled"} 1`,
		`nqd_engine_step_attempts_total{flow="metered"} 3`,
		`nqd_engine_step_attempts_total{flow="doomed"} 1`,
		`nqd_engine_step_retries_total{flow="metered"} 1`,
		`nqd_engine_timers_due_total{kind="retry"} 1`,
		`nqd_engine_timer_lateness_seconds_count{kind="retry"} 1`,
		`nqd_engine_awaits_pending{type="trigger"} 0`,
		`nqd_queue_jobs{queue="default"} 0`,
		`nqd_queue_leased{queue="default"} 0`,
		`nqd_queue_workers{queue="default"} 1`,
		`nqd_queue_unserved{queue="default"} 0`,
	} {
		if !strings.Contains(m, "\n"+line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	if strings.Contains(m, "nqd_appends_total{") {
		t.Errorf("API appends counted, though only the engine and the worker wrote")
	}
	if t.Failed() {
		t.Logf("%d events stored; /metrics:\n%s", stored, grepLines(m, "nqd_engine_", "nqd_appended", "nqd_queue_"))
	}
}

func scrapeApp(t *testing.T, base string) string {
	t.Helper()
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", res.StatusCode, err)
	}
	return string(b)
}

func grepLines(text string, prefixes ...string) string {
	var out strings.Builder
	for line := range strings.Lines(text) {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				out.WriteString(line)
			}
		}
	}
	return out.String()
}
