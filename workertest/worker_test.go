package workertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/flows/flowstest"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/sdk/go/worker"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
	"github.com/rs/zerolog"
)

// TestRunExampleAndDiamond runs the example flow (fetch_data fails once) and
// the diamond of examples/flows through the SDK against a real server.
func TestRunExampleAndDiamond(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	st := bolttest.Open(t, boltstore.Options{})
	log := testkit.Logger(t)
	e := engine.New(st, engine.Options{Logger: log, Interval: 20 * time.Millisecond})
	go func() { _ = e.Run(ctx) }()
	flowstest.Define(t, e, "../flows/testdata")
	srv := httptest.NewServer(handlers.New(handlers.Deps{Store: st, Engine: e, Log: log}).Routes())
	defer srv.Close()

	var fetches, finals atomic.Int32
	emitting := func(ev string) worker.Handler {
		return func(_ context.Context, sc *worker.StepContext) (any, error) {
			return nil, sc.Emit(ev, map[string]any{"by": sc.Job.Step})
		}
	}
	hs := map[string]worker.Handler{
		"fetch_data": func(_ context.Context, sc *worker.StepContext) (any, error) {
			if fetches.Add(1) == 1 {
				return nil, errors.New("Network timeout")
			}
			if err := sc.State().Set("fetched", 3); err != nil {
				return nil, err
			}
			return nil, sc.Emit("fetch_data.completed", map[string]any{"rows": 3})
		},
		"process_data": emitting("process_data.completed"),
		"await_approval": func(_ context.Context, sc *worker.StepContext) (any, error) {
			r, ok := sc.Resume()
			if !ok || r.AwaitType != "trigger" || string(r.Payload) != `{"approved":true}` {
				return nil, worker.Permanent(fmt.Errorf("resumed with %+v, %v; want the trigger's payload", r, ok))
			}
			return "approved", nil
		},
		"start": func(_ context.Context, sc *worker.StepContext) (any, error) {
			if err := sc.Emit("step.a.trigger", 1); err != nil {
				return nil, err
			}
			return nil, sc.Emit("step.b.trigger", 2)
		},
		"parallelA": emitting("step.a.done"),
		"parallelB": emitting("step.b.done"),
		"final": func(_ context.Context, sc *worker.StepContext) (any, error) {
			finals.Add(1)
			var in map[string]json.RawMessage
			if err := sc.Input(&in); err != nil || len(in) != 2 {
				return nil, worker.Permanent(errors.New("final without both inputs"))
			}
			return in, nil
		},
	}
	go func() {
		slogger := slog.New(slog.NewTextHandler(zerolog.NewTestWriter(t), nil))
		_ = worker.Run(ctx, worker.Config{BaseURL: srv.URL, Queues: []string{"default"}, Logger: slogger}, hs)
	}()
	ex, err := e.Start(ctx, "example-flow", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	dia, err := e.Start(ctx, "diamond", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, st, "example-flow", ex.FlowID, store.RunAwaiting)
	waits, err := e.Waits(ctx, engine.WaitQuery{Kind: "trigger"})
	if err != nil || len(waits) != 1 {
		t.Fatalf("waits = %+v, %v; want the approval", waits, err)
	}
	res, err := srv.Client().Post(srv.URL+"/api/_flows/triggers/"+waits[0].TriggerID, "application/json", strings.NewReader(`{"approved":true}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("trigger POST: %d", res.StatusCode)
	}
	waitStatus(t, st, "example-flow", ex.FlowID, store.RunCompleted)
	waitStatus(t, st, "diamond", dia.FlowID, store.RunCompleted)
	if fetches.Load() != 2 || finals.Load() != 1 {
		t.Errorf("fetch_data ran %d times, final %d; want 2 and 1", fetches.Load(), finals.Load())
	}
	// End the worker's long-poll before the server waits for its requests.
	cancel()
}

func waitStatus(t *testing.T, st store.RunStore, flow, run, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		m, err := st.RunMeta(t.Context(), flow, run)
		if err == nil && m.Status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s of %s: status %q (%v), want %s", run, flow, m.Status, err, want)
		}
		select {
		case <-t.Context().Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}
