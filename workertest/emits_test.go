package workertest_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/sdk/go/worker"
)

const chainFlow = "entry: first\nsteps:\n  first: {queue: q1, emits: [first.done]}\n  second: {queue: q1, subscribes: [first.done]}\n"

// emitCounter counts the worker's calls that carry an emit: events calls
// and completions.
type emitCounter struct {
	next              http.RoundTripper
	events, completes atomic.Int32
}

func (c *emitCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil && (strings.HasSuffix(req.URL.Path, "/events") || strings.HasSuffix(req.URL.Path, "/complete")) {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		if bytes.Contains(b, []byte(`"kind":"emit"`)) {
			if strings.HasSuffix(req.URL.Path, "/events") {
				c.events.Add(1)
			} else {
				c.completes.Add(1)
			}
		}
	}
	return c.next.RoundTrip(req)
}

// A step that emits and returns at once reports everything with its
// completion, and the step the emit made ready runs with the emit's
// payload. (A step held up past the wait of step.started sends its emit at
// once instead: each emit goes one way, and a machine that stalls every
// step is unlikely.)
func TestQuickEmitGoesWithTheCompletion(t *testing.T) {
	n := startNQD(t)
	n.putFlow("chain", chainFlow)
	calls := &emitCounter{next: http.DefaultTransport}
	inputs := make(chan string, 3)
	runWorker(t, n.base, worker.Config{Transport: worker.HTTP, Queues: []string{"q1"}, Client: &http.Client{Transport: calls}}, map[string]worker.Handler{
		"first": func(_ context.Context, sc *worker.StepContext) (any, error) {
			return "first", sc.Emit("first.done", map[string]any{"rows": 2})
		},
		"second": func(_ context.Context, sc *worker.StepContext) (any, error) {
			inputs <- string(sc.Job.Input)
			return "second", nil
		},
	})
	const runs = 3
	for range runs {
		evs := n.mustComplete(n.start("chain", nil), runWithin)
		want := "flow.started, step.started first, emit first, step.completed first, step.started second, step.completed second, flow.completed"
		if got := keys(evs); got != want {
			t.Errorf("events %s, want %s", got, want)
		}
		if in := <-inputs; !strings.Contains(in, `"rows":2`) {
			t.Errorf("second step's input %s; want the emit's payload", in)
		}
	}
	e, c := calls.events.Load(), calls.completes.Load()
	if c < 1 || e+c != runs {
		t.Errorf("emits sent in %d events calls and %d completions; want %d in all, most with the completion", e, c, runs)
	}
}

// Once the step reported something, an emit is sent at once: the handler
// that waits for it to be stored sees it before returning.
func TestEmitAfterAReportGoesAtOnce(t *testing.T) {
	n := startNQD(t)
	n.putFlow("chain", chainFlow)
	run := make(chan string, 1)
	runWorker(t, n.base, worker.Config{Queues: []string{"q1"}}, map[string]worker.Handler{
		"first": func(ctx context.Context, sc *worker.StepContext) (any, error) {
			if err := sc.Log("info", "going"); err != nil {
				return nil, err
			}
			if err := sc.Emit("first.done", nil); err != nil {
				return nil, err
			}
			id := <-run
			wait.For(t, runWithin, 10*time.Millisecond, "the emit to be stored before the step returns", func() bool {
				return count(n.events(id), "emit first") == 1
			})
			return "first", nil
		},
		"second": func(context.Context, *worker.StepContext) (any, error) { return "second", nil },
	})
	id := n.start("chain", nil)
	run <- id
	evs := n.mustComplete(id, runWithin)
	if count(evs, "emit first") != 1 || count(evs, "step.completed second") != 1 {
		t.Errorf("events %s", keys(evs))
	}
}

// A step that emits and then fails has its emit stored before the failure,
// through the events call (a failure takes no emits).
func TestQuickEmitBeforeAFailure(t *testing.T) {
	n := startNQD(t)
	n.putFlow("chain", chainFlow)
	runWorker(t, n.base, worker.Config{Queues: []string{"q1"}}, map[string]worker.Handler{
		"first": func(_ context.Context, sc *worker.StepContext) (any, error) {
			if err := sc.Emit("first.done", nil); err != nil {
				return nil, err
			}
			return nil, worker.Permanent(errors.New("bad input"))
		},
		"second": func(context.Context, *worker.StepContext) (any, error) { return "second", nil },
	})
	run := n.start("chain", nil)
	n.waitEnd(run, runWithin)
	got := keys(n.events(run))
	if !strings.HasPrefix(got, "flow.started, step.started first, emit first, ") || count(n.events(run), "step.failed first") != 1 {
		t.Errorf("events %s; want the emit stored, then the failure", got)
	}
}

// An emit nqd refuses for itself (no name) fails the step whose completion
// carried it, and is no sign of an older nqd: the next step's emit still
// goes with its completion.
func TestQuickEmitRefusedFailsTheStep(t *testing.T) {
	n := startNQD(t)
	n.putFlow("chain", chainFlow)
	calls := &emitCounter{next: http.DefaultTransport}
	runWorker(t, n.base, worker.Config{Transport: worker.HTTP, Queues: []string{"q1"}, Concurrency: 1, Client: &http.Client{Transport: calls}}, map[string]worker.Handler{
		"first": func(_ context.Context, sc *worker.StepContext) (any, error) {
			var in struct{ Name string }
			if err := sc.Input(&in); err != nil {
				return nil, err
			}
			return "first", sc.Emit(in.Name, nil)
		},
		"second": func(context.Context, *worker.StepContext) (any, error) { return "second", nil },
	})
	bad := n.start("chain", map[string]any{"name": ""})
	if end := n.waitEnd(bad, runWithin); end != "flow.failed" || count(n.events(bad), "emit") != 0 || count(n.events(bad), "step.started") != 1 {
		t.Errorf("run with an emit without a name ended %s: %s; want step.started kept, no emit", end, keys(n.events(bad)))
	}
	calls.completes.Store(0)
	calls.events.Store(0)
	const runs = 3
	for range runs {
		n.mustComplete(n.start("chain", map[string]any{"name": "first.done"}), runWithin)
	}
	if e, c := calls.events.Load(), calls.completes.Load(); c < 1 || e+c != runs {
		t.Errorf("the next emits went in %d events calls and %d completions; want %d, most with the completion", e, c, runs)
	}
}

// A completion nqd refuses for its result (too large) fails the step, and
// what the completion carried is stored before the failure.
func TestRefusedCompletionKeepsItsEmits(t *testing.T) {
	n := startNQD(t)
	n.putFlow("chain", chainFlow)
	runWorker(t, n.base, worker.Config{Queues: []string{"q1"}}, map[string]worker.Handler{
		"first": func(_ context.Context, sc *worker.StepContext) (any, error) {
			return strings.Repeat("x", 300_000), sc.Emit("first.done", nil)
		},
		"second": func(context.Context, *worker.StepContext) (any, error) { return "second", nil },
	})
	run := n.start("chain", nil)
	if end := n.waitEnd(run, runWithin); end != "flow.failed" {
		t.Fatalf("run ended %s: %s", end, keys(n.events(run)))
	}
	got := keys(n.events(run))
	if !strings.HasPrefix(got, "flow.started, step.started first, emit first, ") || !strings.Contains(got, "step.failed first") {
		t.Errorf("events %s; want step.started and the emit stored, then the failure", got)
	}
}
