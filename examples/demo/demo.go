// Package demo is the demo worker's code: a handler for every step of the
// example flows in examples/flows (example-flow with its retry and approval,
// the diamond's fan-out and fan-in, ml-training writing the run's state, and
// the three-step pipeline), run by cmd/demo-worker through the worker SDK.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nqd-dev/nqd/sdk/go/worker"
)

// Options tune the handlers.
type Options struct {
	// Work is how long each step pretends to work, so a newcomer watching
	// the UI sees steps run; 0 runs them as fast as nqd dispatches.
	Work time.Duration
	// Epochs is how many epochs a training run takes when its input does
	// not say; default 5.
	Epochs int
}

// Handlers returns the handler of every example step, keyed by step name.
func Handlers(o Options) map[string]worker.Handler {
	if o.Epochs <= 0 {
		o.Epochs = 5
	}
	work := func(ctx context.Context) error {
		if o.Work <= 0 {
			return nil
		}
		t := time.NewTimer(o.Work)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
			return nil
		}
	}
	// step wraps a handler with the pretend work before it.
	step := func(h worker.Handler) worker.Handler {
		return func(ctx context.Context, sc *worker.StepContext) (any, error) {
			if err := work(ctx); err != nil {
				return nil, err
			}
			return h(ctx, sc)
		}
	}
	return map[string]worker.Handler{
		"fetch_data":     step(fetchData),
		"process_data":   step(processData),
		"await_approval": step(awaitApproval),
		"start":          step(start),
		"parallelA":      step(branch("step.a.done", 21)),
		"parallelB":      step(branch("step.b.done", 2)),
		"final":          step(final),
		"train":          train(o.Epochs, work),
		"ingest":         step(emitting("ingested")),
		"transform":      step(emitting("transformed")),
		"publish":        step(publish),
	}
}

// fetchData fails its first attempt, as examples/flows/example-flow.yaml
// describes, so the run shows a step.failed with willRetry and a step.retry.
func fetchData(_ context.Context, sc *worker.StepContext) (any, error) {
	if sc.Attempt() == 1 {
		return nil, errors.New("network timeout")
	}
	data := map[string]any{"records": 42}
	return data, sc.Emit("fetch_data.completed", data)
}

func processData(_ context.Context, sc *worker.StepContext) (any, error) {
	var in map[string]struct {
		Records int `json:"records"`
	}
	if err := sc.Input(&in); err != nil {
		return nil, worker.Permanent(err)
	}
	out := map[string]any{"processed": in["fetch_data.completed"].Records}
	return out, sc.Emit("process_data.completed", out)
}

// awaitApproval runs once the approval trigger its step awaits was fired
// (POST /api/_flows/triggers/<id>), with the POST's body as the decision.
func awaitApproval(_ context.Context, sc *worker.StepContext) (any, error) {
	var decision struct {
		Approved *bool  `json:"approved"`
		By       string `json:"by"`
	}
	if r, ok := sc.Resume(); ok && len(r.Payload) > 0 {
		_ = json.Unmarshal(r.Payload, &decision)
	}
	approved := decision.Approved == nil || *decision.Approved
	if err := sc.Log("info", fmt.Sprintf("approval decided: approved=%v by %q", approved, decision.By)); err != nil {
		return nil, err
	}
	return map[string]any{"approved": approved, "by": decision.By}, nil
}

func start(_ context.Context, sc *worker.StepContext) (any, error) {
	if err := sc.Emit("step.a.trigger", map[string]any{"branch": "a"}); err != nil {
		return nil, err
	}
	return nil, sc.Emit("step.b.trigger", map[string]any{"branch": "b"})
}

func branch(event string, value int) worker.Handler {
	return func(_ context.Context, sc *worker.StepContext) (any, error) {
		out := map[string]any{"value": value}
		return out, sc.Emit(event, out)
	}
}

// final gets both branches' payloads keyed by event name, as a step that
// subscribes to several events does.
func final(_ context.Context, sc *worker.StepContext) (any, error) {
	var in map[string]struct {
		Value int `json:"value"`
	}
	if err := sc.Input(&in); err != nil {
		return nil, worker.Permanent(err)
	}
	a, okA := in["step.a.done"]
	b, okB := in["step.b.done"]
	if !okA || !okB {
		return nil, worker.Permanent(fmt.Errorf("final needs both branches, got %v", in))
	}
	return map[string]any{"answer": a.Value * b.Value}, nil
}

func emitting(event string) worker.Handler {
	return func(_ context.Context, sc *worker.StepContext) (any, error) {
		out := map[string]any{"step": sc.Job.Step}
		return out, sc.Emit(event, out)
	}
}

func publish(_ context.Context, sc *worker.StepContext) (any, error) {
	return map[string]any{"published": true}, nil
}

// train is the ml-training example's step (examples/flows/ml-training.yaml):
// progress goes to the run's state, so the state at any event shows how far
// training had come.
func train(defaultEpochs int, work func(context.Context) error) worker.Handler {
	return func(ctx context.Context, sc *worker.StepContext) (any, error) {
		var in struct {
			Epochs int `json:"epochs"`
		}
		if err := sc.Input(&in); err != nil {
			return nil, worker.Permanent(err)
		}
		epochs := in.Epochs
		if epochs <= 0 {
			epochs = defaultEpochs
		}
		st := sc.State()
		err := st.SetBatch(map[string]any{
			"status": "training", "epoch": 0, "totalEpochs": epochs, "accuracy": 0, "loss": 0,
			"startTime": time.Now().UTC().Format(time.RFC3339),
		})
		if err != nil {
			return nil, err
		}
		if err := sc.Log("info", "Training started"); err != nil {
			return nil, err
		}
		for epoch := 1; epoch <= epochs; epoch++ {
			if err := work(ctx); err != nil {
				return nil, err
			}
			accuracy := 1 - 0.5*math.Pow(0.6, float64(epoch))
			loss := math.Round(0.9*math.Pow(0.6, float64(epoch))*1000) / 1000
			accuracy = math.Round(accuracy*1000) / 1000
			if err := st.SetBatch(map[string]any{"epoch": epoch, "accuracy": accuracy, "loss": loss}); err != nil {
				return nil, err
			}
			if err := sc.Log("debug", fmt.Sprintf("Epoch %d/%d", epoch, epochs)); err != nil {
				return nil, err
			}
			var current float64
			if _, err := st.Get("accuracy", &current); err != nil {
				return nil, err
			}
			if current > 0.95 {
				if err := sc.Log("info", "Target accuracy reached"); err != nil {
					return nil, err
				}
				break
			}
		}
		if err := st.Set("status", "complete"); err != nil {
			return nil, err
		}
		if err := sc.Log("info", "Training complete"); err != nil {
			return nil, err
		}
		return st.All()
	}
}
