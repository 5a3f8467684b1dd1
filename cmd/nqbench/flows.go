package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/nqd-dev/nqd/examples/demo"
	"github.com/nqd-dev/nqd/sdk/go/worker"
)

// flowsResult is the flow throughput profile: runs of the three-step
// `pipeline` flow started open loop and carried out by the demo worker.
type flowsResult struct {
	Flow        string     `json:"flow"`
	Steps       int        `json:"steps"`
	Workers     int        `json:"workers"`
	Start       latencyRow `json:"start"`      // POST .../start answered
	Completion  latencyRow `json:"completion"` // intended start → flow.completed's timestamp
	Started     int64      `json:"started"`
	Completed   int64      `json:"completed"`
	RunsPerSec  float64    `json:"runs_per_sec"`
	StepsPerSec float64    `json:"steps_per_sec"`
}

// startedRun is one run the profile started, and when it meant to.
type startedRun struct {
	id       string
	intended time.Time
}

// runFlows offers rate run starts/s for d while the demo worker's handlers,
// in this process, claim and complete the steps over HTTP. Runs/s counts
// from the first intended start to the last completion, so it is the rate
// nqd and its worker sustained, not the offered one.
func runFlows(ctx context.Context, e env, rate float64, d time.Duration, conns, workers int) (flowsResult, error) {
	const flow, steps = "pipeline", 3
	res := flowsResult{Flow: flow, Steps: steps, Workers: workers}
	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = worker.Run(wctx, worker.Config{
			BaseURL: e.base, Queues: []string{"default"}, Concurrency: workers,
			Client: httpClient(workers + 2), Logger: slog.New(slog.DiscardHandler),
		}, demo.Handlers(demo.Options{}))
	})
	defer func() { stopWorkers(); wg.Wait() }()

	hc := httpClient(conns)
	var mu sync.Mutex
	var runs []startedRun
	start := func(ctx context.Context, seq int64, intended time.Time) error {
		body := []byte(`{"seq":` + strconv.FormatInt(seq, 10) + `,"records":10}`)
		resp, err := hc.Post(e.base+"/api/_flows/"+flow+"/start", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		var out struct {
			FlowID string `json:"flowId"`
		}
		if resp.StatusCode != http.StatusOK {
			_, _ = io.Copy(io.Discard, resp.Body)
			return fmt.Errorf("start: status %d", resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return err
		}
		mu.Lock()
		runs = append(runs, startedRun{id: out.FlowID, intended: intended})
		mu.Unlock()
		return nil
	}
	cpu := meterCPU(e)
	r := openLoop(ctx, "flows", rate, d, conns, start)
	res.Start = row("run start", rate, r)
	res.Started = r.OK

	// Wait, with a deadline, until every started run has completed.
	deadline := time.Now().Add(max(d, 30*time.Second))
	for {
		n, err := completedRuns(ctx, hc, e.base, flow)
		if err != nil {
			return res, err
		}
		res.Completed = n
		if n >= res.Started || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	res.Start.CPU = cpu.String()

	h := newHist()
	var first, last time.Time
	for _, run := range runs {
		done, err := completedAt(ctx, hc, e.base, run.id)
		if err != nil {
			continue // not completed: counted by Completed < Started
		}
		_ = h.RecordValue(max(done.Sub(run.intended).Microseconds(), 1))
		if first.IsZero() || run.intended.Before(first) {
			first = run.intended
		}
		if done.After(last) {
			last = done
		}
	}
	span := last.Sub(first).Seconds()
	res.RunsPerSec = safeDiv(float64(h.TotalCount()), span)
	res.StepsPerSec = res.RunsPerSec * steps
	res.Completion = rowOf("start → completed", rate, res.RunsPerSec, h.TotalCount(), res.Started-h.TotalCount(), h)
	if res.Completed < res.Started {
		return res, fmt.Errorf("%d of %d runs did not complete in time", res.Started-res.Completed, res.Started)
	}
	if r.Errors > 0 {
		return res, fmt.Errorf("%d of %d starts failed", r.Errors, r.Sent)
	}
	return res, nil
}

// completedRuns is the size of the flow's completed-runs index.
func completedRuns(ctx context.Context, hc *http.Client, base, flow string) (int64, error) {
	var out struct {
		Total int64 `json:"total"`
	}
	err := getJSON(ctx, hc, base+"/api/_events/flow/list?name="+flow+"&status=completed&limit=1", &out)
	return out.Total, err
}

// completedAt is the store's time of the run's flow.completed event.
func completedAt(ctx context.Context, hc *http.Client, base, run string) (time.Time, error) {
	var out struct {
		Events []struct {
			Kind string `json:"kind"`
			TS   string `json:"ts"`
		} `json:"events"`
	}
	if err := getJSON(ctx, hc, base+"/api/_events/flow/"+run, &out); err != nil {
		return time.Time{}, err
	}
	for _, ev := range out.Events {
		if ev.Kind == "flow.completed" {
			return time.Parse(time.RFC3339Nano, ev.TS)
		}
	}
	return time.Time{}, fmt.Errorf("run %s has not completed", run)
}

func getJSON(ctx context.Context, hc *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
