package workertest_test

// Steps that must end, one way or the other, and workers that must stop:
// values that cannot be encoded, an outcome held up by a busy nqd for
// longer than a lease, a short lease with a second worker waiting, a
// cancelled run, a handler that panics.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/sdk/go/worker"
)

// A state value, a log's metadata, an emit's payload or a result that
// cannot be encoded fails the step at once with a message naming it: the
// call returns an *EncodeError, nothing of it is sent, and the step fails
// even when the handler drops the error. The step is retried as its policy
// says, no more.
func TestUnencodableValues(t *testing.T) {
	n := startNQD(t)
	n.putFlow("bad", "entry: work\nsteps:\n  work: {queue: q1, emits: [done], retryPolicy: {attempts: 2}}\n")
	calls := map[string]func(sc *worker.StepContext) (any, error){
		"state value": func(sc *worker.StepContext) (any, error) {
			return nil, sc.State().Set("k", make(chan int))
		},
		"log meta": func(sc *worker.StepContext) (any, error) {
			_ = sc.Log("info", "x", "meta", func() {}) // the error dropped
			return "ok", nil
		},
		"emit payload": func(sc *worker.StepContext) (any, error) {
			return nil, sc.Emit("done", math.Inf(1))
		},
		"result": func(*worker.StepContext) (any, error) {
			return map[string]any{"c": make(chan int)}, nil
		},
	}
	var which atomic.Value
	var ran atomic.Int32
	var typed atomic.Int32
	runWorker(t, n.base, worker.Config{Queues: []string{"q1"}}, map[string]worker.Handler{
		"work": func(_ context.Context, sc *worker.StepContext) (any, error) {
			ran.Add(1)
			res, err := calls[which.Load().(string)](sc)
			var ee *worker.EncodeError
			if errors.As(err, &ee) {
				typed.Add(1)
			}
			return res, err
		},
	})
	for field := range calls {
		t.Run(field, func(t *testing.T) {
			which.Store(field)
			ran.Store(0)
			typed.Store(0)
			run := n.start("bad", nil)
			if end := n.waitEnd(run, runWithin); end != "flow.failed" {
				t.Fatalf("run ended %s: %s", end, keys(n.events(run)))
			}
			evs := n.events(run)
			var failures []string
			for _, e := range evs {
				if e.Kind == "step.failed" {
					failures = append(failures, string(e.Data))
				}
			}
			if len(failures) != 2 || ran.Load() != 2 {
				t.Errorf("%d failures in %d runs of the step, want 2 in 2 (the policy's attempts): %s", len(failures), ran.Load(), keys(evs))
			}
			for _, f := range failures {
				if !strings.Contains(f, field) || !strings.Contains(f, "cannot be encoded as JSON") {
					t.Errorf("step.failed %s, want the message to name the %s", f, field)
				}
			}
			if want := int32(2); field != "log meta" && field != "result" && typed.Load() != want {
				t.Errorf("%d calls returned an *worker.EncodeError, want %d", typed.Load(), want)
			}
			if count(evs, "emit") != 0 || count(evs, "state.set") != 0 || count(evs, "log") != 0 {
				t.Errorf("events %s, want nothing of the value stored", keys(evs))
			}
		})
	}
}

// failingFor is a proxy to nqd at target that answers every completion with
// a 503 until d has passed since the first one.
func failingFor(t *testing.T, target string, d time.Duration) (base string, refused *atomic.Int32) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	refused = new(atomic.Int32)
	var first atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/complete") {
			now := time.Now().UnixNano()
			first.CompareAndSwap(0, now)
			if time.Duration(now-first.Load()) < d {
				refused.Add(1)
				http.Error(w, `{"error":{"code":"unavailable","message":"Try again."}}`, http.StatusServiceUnavailable)
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, refused
}

// An outcome answered with 5xx for longer than a lease still reaches nqd:
// the job is heartbeaten until its outcome is acknowledged.
func TestOutcomeThroughALongOutage(t *testing.T) {
	n := startNQD(t, "NQ_JOB_LEASE=1500ms")
	n.putFlow("one", "entry: work\nsteps:\n  work: {queue: q1}\n")
	base, refused := failingFor(t, n.base, 4*time.Second)
	runWorker(t, base, worker.Config{Transport: worker.HTTP, Queues: []string{"q1"}}, map[string]worker.Handler{
		"work": func(context.Context, *worker.StepContext) (any, error) { return "ok", nil },
	})
	evs := n.mustComplete(n.start("one", nil), runWithin)
	if count(evs, "step.completed") != 1 || count(evs, "step.failed") != 0 || find(evs, "step.completed").Attempt != 1 {
		t.Errorf("events %s, want one completion on attempt 1", keys(evs))
	}
	if refused.Load() < 2 {
		t.Errorf("%d completions refused, want several", refused.Load())
	}
}

// With a lease of 3 s and the worker's defaults, a step longer than the
// lease keeps its job while a second worker waits on the queue: the step
// runs once.
func TestShortLeaseWithASecondWorker(t *testing.T) {
	n := startNQD(t, "NQ_JOB_LEASE=3s")
	n.putFlow("long", "entry: work\nsteps:\n  work: {queue: q1, retryPolicy: {attempts: 3}}\n")
	var ran atomic.Int32
	handlers := map[string]worker.Handler{
		"work": func(ctx context.Context, _ *worker.StepContext) (any, error) {
			ran.Add(1)
			select {
			case <-time.After(5 * time.Second): // longer than the lease
				return "done", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	}
	runWorker(t, n.base, worker.Config{Queues: []string{"q1"}}, handlers)
	runWorker(t, n.base, worker.Config{Queues: []string{"q1"}}, handlers)
	evs := n.mustComplete(n.start("long", nil), runWithin)
	if ran.Load() != 1 || count(evs, "step.started") != 1 || count(evs, "step.failed") != 0 {
		t.Errorf("the step ran %d times: %s; want once", ran.Load(), keys(evs))
	}
}

// A run cancelled while its step runs: the handler's context ends with
// ErrCanceled, nothing more is reported, and the worker stops in time.
func TestCancelledRun(t *testing.T) {
	n := startNQD(t, "NQ_JOB_LEASE=3s")
	n.putFlow("one", "entry: work\nsteps:\n  work: {queue: q1}\n")
	entered := make(chan struct{}, 1)
	causes := make(chan error, 1)
	stop, result := runWorker(t, n.base, worker.Config{Queues: []string{"q1"}, Grace: time.Second}, map[string]worker.Handler{
		"work": func(ctx context.Context, sc *worker.StepContext) (any, error) {
			entered <- struct{}{}
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil, ctx.Err()
		},
	})
	run := n.start("one", nil)
	<-entered
	if s := n.do(http.MethodPost, "/api/_flows/one/runs/"+run+"/cancel", nil, nil); s != http.StatusOK {
		t.Fatalf("cancel: %d", s)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, worker.ErrCanceled) {
			t.Errorf("the step's context ended with %v, want ErrCanceled", cause)
		}
	case <-time.After(runWithin):
		t.Fatal("the step was not told its run was cancelled")
	}
	if end := n.waitEnd(run, runWithin); end != "flow.cancelled" {
		t.Errorf("run ended %s", end)
	}
	stop()
	if err := <-result; err != nil {
		t.Errorf("Run returned %v", err)
	}
	if evs := n.events(run); count(evs, "step.failed") != 0 || count(evs, "step.completed") != 0 {
		t.Errorf("events %s, want nothing reported after the cancel", keys(evs))
	}
}

// A handler that panics fails its step with the panic's value, and the
// worker goes on with the next job.
func TestHandlerPanics(t *testing.T) {
	n := startNQD(t)
	n.putFlow("one", "entry: work\nsteps:\n  work: {queue: q1}\n")
	var calls atomic.Int32
	runWorker(t, n.base, worker.Config{Queues: []string{"q1"}, Concurrency: 1}, map[string]worker.Handler{
		"work": func(context.Context, *worker.StepContext) (any, error) {
			if calls.Add(1) == 1 {
				panic("boom")
			}
			return "ok", nil
		},
	})
	run := n.start("one", nil)
	if end := n.waitEnd(run, runWithin); end != "flow.failed" {
		t.Fatalf("run ended %s", end)
	}
	if f := string(find(n.events(run), "step.failed").Data); !strings.Contains(f, "handler panicked: boom") {
		t.Errorf("step.failed %s, want the panic", f)
	}
	n.mustComplete(n.start("one", nil), runWithin)
}

// Two flows with a step of the same name on one queue: each job gets the
// handler of its flow and step, and a step of any other flow the one keyed
// by its step alone.
func TestHandlersByFlowAndStep(t *testing.T) {
	n := startNQD(t)
	for _, f := range []string{"a", "b", "c"} {
		n.putFlow(f, "entry: work\nsteps:\n  work: {queue: q1}\n")
	}
	by := func(who string) worker.Handler {
		return func(context.Context, *worker.StepContext) (any, error) { return who, nil }
	}
	runWorker(t, n.base, worker.Config{Queues: []string{"q1"}}, map[string]worker.Handler{
		"a/work": by("a"), "b/work": by("b"), "work": by("any"),
	})
	for f, want := range map[string]string{"a": `"a"`, "b": `"b"`, "c": `"any"`} {
		evs := n.mustComplete(n.start(f, nil), runWithin)
		if got := string(find(evs, "step.completed").Data); !strings.Contains(got, fmt.Sprintf(`"result":%s`, want)) {
			t.Errorf("flow %s: step.completed %s, want result %s", f, got, want)
		}
	}
}

// A worker whose outcome nqd keeps refusing with 5xx still stops within its
// grace period.
func TestStopWhileAnOutcomeIsRetried(t *testing.T) {
	n := startNQD(t)
	n.putFlow("one", "entry: work\nsteps:\n  work: {queue: q1}\n")
	base, refused := failingFor(t, n.base, time.Hour)
	stop, result := runWorker(t, base, worker.Config{Transport: worker.HTTP, Queues: []string{"q1"}, Grace: time.Second}, map[string]worker.Handler{
		"work": func(context.Context, *worker.StepContext) (any, error) { return "ok", nil },
	})
	n.start("one", nil)
	wait.For(t, runWithin, 10*time.Millisecond, "nqd to refuse the completion", func() bool { return refused.Load() > 0 })
	stop()
	select {
	case err := <-result:
		if err != nil {
			t.Errorf("Run returned %v", err)
		}
	case <-time.After(runWithin):
		t.Fatal("Run did not return")
	}
}
