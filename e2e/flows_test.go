package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/sdk/go/worker"
)

// TestExampleFlows runs the flows of examples/flows through the server and
// the demo worker: example-flow with its retried fetch, the diamond, and the
// ml-training run writing state.
func TestExampleFlows(t *testing.T) {
	backendtest.Each(t, backends, func(t *testing.T, b backendtest.Backend) {
		args := b.Args(t)
		base := startServer(t, args)
		startWorker(t, base, 4, demoHandlers())
		example := startRun(t, base, "example-flow", map[string]any{"url": "https://example.com"})
		diamond := startRun(t, base, "diamond", nil)
		training := startRun(t, base, "ml-training", map[string]any{"epochs": 3})
		// The approval is a person's: fire the trigger the run waits on,
		// as curl would.
		var waits struct {
			Items []struct {
				RunID     string `json:"runId"`
				TriggerID string `json:"triggerId"`
			} `json:"items"`
		}
		waitFor(t, 30*time.Second, "example-flow to await its approval", func() bool {
			call(t, "GET", base+"/api/_flows/waits?kind=trigger&flowName=example-flow", nil, &waits)
			return len(waits.Items) == 1 && waits.Items[0].RunID == example
		})
		var fired struct {
			Status string `json:"status"`
		}
		call(t, "POST", base+"/api/_flows/triggers/"+waits.Items[0].TriggerID, map[string]any{"approved": true, "by": "ops"}, &fired)
		if fired.Status != "fired" {
			t.Errorf("trigger POST answered %+v", fired)
		}
		for _, flow := range []string{"example-flow", "diamond", "ml-training"} {
			waitFor(t, 30*time.Second, flow+" to complete", func() bool { return runs(t, base, flow, "completed", 0, 1).Total == 1 })
		}

		want := map[string][]string{
			"": {"flow.started", "flow.completed"},
			"fetch_data": {
				"step.started fetch_data", "step.failed fetch_data willRetry=true", "step.retry fetch_data",
				"step.started fetch_data", "emit fetch_data", "step.completed fetch_data",
			},
			"process_data": {"step.started process_data", "emit process_data", "step.completed process_data"},
			"await_approval": {
				"step.await.trigger await_approval", "step.resumed await_approval",
				"step.started await_approval", "log await_approval", "step.completed await_approval",
			},
		}
		ex := events(t, base, example)
		if diff := cmp.Diff(want, ex.bySteps()); diff != "" {
			t.Errorf("example-flow events by step (-want +got):\n%s", diff)
		}
		if k := ex.kinds(); k[len(k)-1] != "flow.completed" {
			t.Errorf("example-flow ends with %q, want flow.completed last", k[len(k)-1])
		}

		got := events(t, base, diamond)
		k := got.kinds()
		for _, step := range []string{"start", "parallelA", "parallelB", "final"} {
			if n := count(k, "step.completed "+step); n != 1 {
				t.Errorf("diamond step %s completed %d times: %v", step, n, k)
			}
		}
		var final struct {
			Result struct{ Answer int } `json:"result"`
		}
		for _, e := range got.Events {
			if e.Kind == "step.completed" && e.Step == "final" {
				_ = json.Unmarshal(e.Data, &final)
			}
		}
		if final.Result.Answer != 42 {
			t.Errorf("final's result = %+v, want 21*2 from both branches", final)
		}

		var state map[string]any
		if err := json.Unmarshal(events(t, base, training).State, &state); err != nil {
			t.Fatal(err)
		}
		if st, _ := state["state"].(map[string]any); st["status"] != "complete" || st["epoch"] != float64(3) || st["totalEpochs"] != float64(3) {
			t.Errorf("training run's state = %v, want status complete after 3 of 3 epochs", state["state"])
		}
	})
}

// TestFailureAndCancel: a non-retriable failure fails the run, and a cancel
// while a step runs stops the step and every step after it.
func TestFailureAndCancel(t *testing.T) {
	backendtest.Each(t, backends, func(t *testing.T, b backendtest.Backend) {
		args := b.Args(t)
		base := startServer(t, args)
		var mu sync.Mutex
		published := 0
		blocked := make(chan string, 4)
		stopped := make(chan error, 4)
		handlers := demoHandlers()
		handlers["transform"] = func(ctx context.Context, sc *worker.StepContext) (any, error) {
			var in map[string]struct{ Mode string }
			_ = sc.Input(&in)
			if in["ingested"].Mode != "" {
				// ingest's emit queues this step before ingest completes:
				// fail once its completion is stored, so the run's history
				// does not depend on which worker call lands first.
				stepCompleted(ctx, base, sc.Job.RunID, "ingest")
				return nil, worker.Permanent(errors.New("unsupported format"))
			}
			blocked <- sc.Job.RunID
			<-ctx.Done()
			stopped <- context.Cause(ctx)
			return nil, context.Cause(ctx)
		}
		handlers["ingest"] = func(_ context.Context, sc *worker.StepContext) (any, error) {
			var in struct{ Mode string }
			_ = sc.Input(&in)
			return nil, sc.Emit("ingested", map[string]string{"mode": in.Mode})
		}
		handlers["publish"] = func(context.Context, *worker.StepContext) (any, error) {
			mu.Lock()
			published++
			mu.Unlock()
			return nil, nil
		}
		startWorker(t, base, 4, handlers)

		failing := startRun(t, base, "pipeline", map[string]any{"mode": "xml"})
		waitFor(t, 30*time.Second, "the run to fail", func() bool { return runs(t, base, "pipeline", "failed", 0, 1).Total == 1 })
		want := map[string][]string{
			"":          {"flow.started", "flow.failed"},
			"ingest":    {"step.started ingest", "emit ingest", "step.completed ingest"},
			"transform": {"step.started transform", "step.failed transform willRetry=false"},
		}
		if diff := cmp.Diff(want, events(t, base, failing).bySteps()); diff != "" {
			t.Errorf("failed run's events by step (-want +got):\n%s", diff)
		}

		canceled := startRun(t, base, "pipeline", nil)
		select {
		case run := <-blocked:
			if run != canceled {
				t.Fatalf("transform of %s blocked, want %s", run, canceled)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("transform never ran")
		}
		call(t, "POST", base+"/api/_flows/pipeline/runs/"+canceled+"/cancel", map[string]string{"reason": "test"}, nil)
		select {
		case cause := <-stopped:
			if !errors.Is(cause, worker.ErrCanceled) {
				t.Errorf("step stopped by %v, want worker.ErrCanceled", cause)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the running step was not stopped")
		}
		k := events(t, base, canceled).kinds()
		if k[len(k)-1] != "flow.cancelled" || count(k, "step.started publish") != 0 || count(k, "step.completed transform") != 0 {
			t.Errorf("canceled run's events = %v", k)
		}
		if p := runs(t, base, "pipeline", "cancelled", 0, 5); p.Total != 1 || p.Items[0].ID != canceled {
			t.Errorf("cancelled runs = %+v", p)
		}
		mu.Lock()
		defer mu.Unlock()
		if published != 0 {
			t.Errorf("publish ran %d times", published)
		}
	})
}

// stepCompleted waits until run's stream holds step.completed of step, or
// ctx ends; it runs inside a step handler, so it reports nothing itself (the
// test's own checks of the stream do).
func stepCompleted(ctx context.Context, base, run, step string) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/_events/flow/"+run, nil)
		if err != nil {
			return
		}
		if res, err := http.DefaultClient.Do(req); err == nil {
			var r runEvents
			err = json.NewDecoder(res.Body).Decode(&r)
			_ = res.Body.Close()
			for _, e := range r.Events {
				if err == nil && e.Kind == "step.completed" && e.Step == step {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
