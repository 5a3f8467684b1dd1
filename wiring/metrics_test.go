package wiring

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestMetricsServed checks that the assembled server measures appends at
// both stages and serves the result at /metrics.
func TestMetricsServed(t *testing.T) {
	base, _ := mustStartApp(t, testConfig(t))
	if code, _ := do(t, "POST", base+"/api/_events/flow/run-1", `{"kind":"flow.started","flowName":"demo"}`); code != http.StatusCreated {
		t.Fatalf("append: got %d, want 201", code)
	}
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", res.StatusCode, err)
	}
	for _, line := range []string{
		`nqd_appends_total{result="ok"} 1`,
		`nqd_append_duration_seconds_count{stage="store"} 1`,
		`nqd_append_duration_seconds_count{stage="total"} 1`,
		`nqd_live_feed_up 1`,
		`nqd_cache_entries 0`,
	} {
		if !strings.Contains(string(body), "\n"+line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}

// TestQueueDepthServed: a started run's entry job shows in the queue-depth
// series of its queue.
func TestQueueDepthServed(t *testing.T) {
	cfg := testConfig(t)
	cfg.FlowsDir = "../flows/testdata"
	base, _ := mustStartApp(t, cfg)
	if code, body := do(t, "POST", base+"/api/_flows/diamond/start", `{}`); code != http.StatusOK {
		t.Fatalf("start: %d %v", code, body)
	}
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, want := range []string{`nqd_queue_jobs{queue="default"} 1`, `nqd_queue_due{queue="default"} 1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
