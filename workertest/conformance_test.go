package workertest_test

// The conformance scenarios of docs/worker-protocol.md, each against a real
// nqd binary built from this tree. The other SDKs' suites mirror them.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/internal/pgtest"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/sdk/go/worker"
)

const runWithin = 20 * time.Second

// 1. Claim and complete.
func TestClaimAndComplete(t *testing.T) {
	n := startNQD(t)
	n.putFlow("one", "entry: work\nsteps:\n  work: {queue: q1}\n")
	runWorker(t, n.base, worker.Config{Queues: []string{"q1"}}, map[string]worker.Handler{
		"work": func(_ context.Context, sc *worker.StepContext) (any, error) {
			var in struct{ N int }
			if err := sc.Input(&in); err != nil {
				return nil, err
			}
			if err := sc.Log("info", "hello", "n", in.N); err != nil {
				return nil, err
			}
			if err := sc.Progress(50); err != nil {
				return nil, err
			}
			return map[string]any{"doubled": in.N * 2}, nil
		},
	})
	run := n.start("one", map[string]any{"n": 21})
	evs := n.mustComplete(run, runWithin)
	want := []string{"flow.started", "step.started work", "log work", "step.progress work", "step.completed work", "flow.completed"}
	var got []string
	for _, e := range evs {
		if !strings.HasPrefix(e.Kind, "step.queued") && e.Kind != "step.dispatched" {
			got = append(got, e.key())
		}
	}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("events %v, want %v", got, want)
	}
	for _, e := range evs {
		switch e.Kind {
		case "log":
			var d struct {
				Level, Msg string
				N          int
			}
			if err := json.Unmarshal(e.Data, &d); err != nil || d.Level != "info" || d.Msg != "hello" || d.N != 21 {
				t.Errorf("log data %s, want level info, msg hello, n 21", e.Data)
			}
		case "step.progress":
			if string(e.Data) != `{"progress":50}` {
				t.Errorf("progress data %s", e.Data)
			}
		case "step.completed":
			var d struct{ Result map[string]int }
			if err := json.Unmarshal(e.Data, &d); err != nil || d.Result["doubled"] != 42 || e.Attempt != 1 {
				t.Errorf("step.completed %s attempt %d, want result doubled 42 on attempt 1", e.Data, e.Attempt)
			}
		}
	}
}

// 2. Retriable failure, then success.
func TestRetriableFailureThenSuccess(t *testing.T) {
	n := startNQD(t)
	n.putFlow("flaky", "entry: work\nsteps:\n  work: {queue: q1, retryPolicy: {attempts: 2, backoff: {type: fixed, delayMs: 10}}}\n")
	var ran atomic.Int32
	runWorker(t, n.base, worker.Config{Queues: []string{"q1"}}, map[string]worker.Handler{
		"work": func(_ context.Context, sc *worker.StepContext) (any, error) {
			ran.Add(1)
			if sc.Attempt() == 1 {
				return nil, errors.New("network timeout")
			}
			return "ok", nil
		},
	})
	run := n.start("flaky", nil)
	evs := n.mustComplete(run, runWithin)
	if ran.Load() != 2 || count(evs, "step.failed") != 1 || count(evs, "step.retry") != 1 || count(evs, "step.completed") != 1 {
		t.Fatalf("ran %d times; events %s", ran.Load(), keys(evs))
	}
	for _, e := range evs {
		if e.Kind == "step.failed" && !strings.Contains(string(e.Data), `"willRetry":true`) {
			t.Errorf("step.failed %s, want willRetry", e.Data)
		}
		if e.Kind == "step.completed" && e.Attempt != 2 {
			t.Errorf("completed on attempt %d, want 2", e.Attempt)
		}
	}
}

// 3. Non-retriable failure.
func TestPermanentFailure(t *testing.T) {
	n := startNQD(t)
	n.putFlow("doomed", "entry: work\nsteps:\n  work: {queue: q1, retryPolicy: {attempts: 3, backoff: {type: fixed, delayMs: 10}}}\n")
	var ran atomic.Int32
	runWorker(t, n.base, worker.Config{Queues: []string{"q1"}}, map[string]worker.Handler{
		"work": func(context.Context, *worker.StepContext) (any, error) {
			ran.Add(1)
			return nil, worker.Permanent(errors.New("bad input"))
		},
	})
	run := n.start("doomed", nil)
	if end := n.waitEnd(run, runWithin); end != "flow.failed" {
		t.Fatalf("run ended with %s, want flow.failed", end)
	}
	evs := n.events(run)
	if ran.Load() != 1 || count(evs, "step.failed") != 1 || count(evs, "step.retry") != 0 {
		t.Fatalf("ran %d times; events %s", ran.Load(), keys(evs))
	}
	for _, e := range evs {
		if e.Kind == "step.failed" && !strings.Contains(string(e.Data), `"willRetry":false`) {
			t.Errorf("step.failed %s, want willRetry false", e.Data)
		}
	}
}

// 4. Fan-in with emits from two steps.
func TestFanIn(t *testing.T) {
	n := startNQD(t)
	n.putFlow("fan", `entry: start
steps:
  start: {queue: q1, emits: [a, b]}
  left:  {queue: q1, subscribes: [a], emits: [l]}
  right: {queue: q1, subscribes: [b], emits: [r]}
  join:  {queue: q1, subscribes: [l, r]}
`)
	var joins atomic.Int32
	var joinInput sync.Map
	emit := func(names ...string) worker.Handler {
		return func(_ context.Context, sc *worker.StepContext) (any, error) {
			for _, name := range names {
				if err := sc.Emit(name, map[string]any{"from": sc.Job.Step}); err != nil {
					return nil, err
				}
			}
			return nil, nil
		}
	}
	runWorker(t, n.base, worker.Config{Queues: []string{"q1"}}, map[string]worker.Handler{
		"start": emit("a", "b"),
		"left":  emit("l"),
		"right": emit("r"),
		"join": func(_ context.Context, sc *worker.StepContext) (any, error) {
			joins.Add(1)
			joinInput.Store(sc.Job.RunID, string(sc.Job.Input))
			return nil, nil
		},
	})
	run := n.start("fan", nil)
	n.mustComplete(run, runWithin)
	in, _ := joinInput.Load(run)
	var got map[string]struct{ From string }
	if err := json.Unmarshal([]byte(fmt.Sprint(in)), &got); err != nil || got["l"].From != "left" || got["r"].From != "right" || len(got) != 2 {
		t.Errorf("join input %v, want l from left and r from right", in)
	}
	if joins.Load() != 1 {
		t.Errorf("join ran %d times, want once", joins.Load())
	}
}

// 5. State writes read back.
func TestStateReadBack(t *testing.T) {
	n := startNQD(t)
	n.putFlow("stateful", "entry: write\nsteps:\n  write: {queue: q1, emits: [written]}\n  read: {queue: q1, subscribes: [written]}\n")
	readBack := make(chan map[string]json.RawMessage, 1)
	runWorker(t, n.base, worker.Config{Queues: []string{"q1"}}, map[string]worker.Handler{
		"write": func(_ context.Context, sc *worker.StepContext) (any, error) {
			st := sc.State()
			if err := st.Set("x", 1); err != nil {
				return nil, err
			}
			if err := st.Set("y", "two"); err != nil {
				return nil, err
			}
			if err := st.SetBatch(map[string]any{"z": 3, "w": true}); err != nil {
				return nil, err
			}
			if err := st.Delete("y"); err != nil {
				return nil, err
			}
			var x int
			if ok, err := st.Get("x", &x); err != nil || !ok || x != 1 {
				return nil, worker.Permanent(fmt.Errorf("get x in the writing step = %d, %v, %v", x, ok, err))
			}
			var y string
			if ok, err := st.Get("y", &y); err != nil || ok {
				return nil, worker.Permanent(fmt.Errorf("get y after delete = %q, %v, %v", y, ok, err))
			}
			return nil, sc.Emit("written", nil)
		},
		"read": func(_ context.Context, sc *worker.StepContext) (any, error) {
			all, err := sc.State().All()
			if err != nil {
				return nil, err
			}
			readBack <- all
			return nil, nil
		},
	})
	run := n.start("stateful", nil)
	n.mustComplete(run, runWithin)
	all := <-readBack
	if len(all) != 3 || string(all["x"]) != "1" || string(all["z"]) != "3" || string(all["w"]) != "true" {
		t.Errorf("state read by the next step = %s, want x 1, z 3, w true", all)
	}
	var ans struct {
		State struct{ State map[string]json.RawMessage }
	}
	if s := n.do(http.MethodGet, "/api/_events/flow/"+run+"/state", nil, &ans); s != http.StatusOK || len(ans.State.State) != 3 {
		t.Errorf("GET state = %d %s", s, ans.State.State)
	}
}

// 6. An approval await resumed by a trigger.
func TestTriggerAwait(t *testing.T) {
	n := startNQD(t)
	n.putFlow("approval", `entry: ask
steps:
  ask: {queue: q1, emits: [asked]}
  approve:
    queue: q1
    subscribes: [asked]
    await: {type: trigger, triggerType: user, timeout: 60000}
`)
	resumed := make(chan worker.Resume, 1)
	runWorker(t, n.base, worker.Config{Queues: []string{"q1"}}, map[string]worker.Handler{
		"ask": func(_ context.Context, sc *worker.StepContext) (any, error) { return nil, sc.Emit("asked", nil) },
		"approve": func(_ context.Context, sc *worker.StepContext) (any, error) {
			r, ok := sc.Resume()
			if !ok {
				return nil, worker.Permanent(errors.New("no _resume in the input"))
			}
			resumed <- r
			return nil, nil
		},
	})
	run := n.start("approval", nil)
	var trigger string
	wait.For(t, runWithin, 20*time.Millisecond, "the approval to wait", func() bool {
		var ans struct {
			Items []struct{ RunID, TriggerID string }
		}
		n.do(http.MethodGet, "/api/_flows/waits?kind=trigger&flowName=approval", nil, &ans)
		for _, it := range ans.Items {
			if it.RunID == run {
				trigger = it.TriggerID
			}
		}
		return trigger != ""
	})
	if s := n.do(http.MethodPost, "/api/_flows/triggers/"+trigger, map[string]any{"approved": true, "by": "ops"}, nil); s != http.StatusOK {
		t.Fatalf("fire trigger: %d", s)
	}
	n.mustComplete(run, runWithin)
	r := <-resumed
	if r.AwaitType != "trigger" || r.TriggerID != trigger || string(r.Payload) != `{"approved":true,"by":"ops"}` {
		t.Errorf("resumed with %+v, want the trigger and its payload", r)
	}
}

// claimByHand claims one job of queue with raw HTTP, as a worker that
// then dies would.
func claimByHand(t *testing.T, n *nqd, queue string) worker.Job {
	t.Helper()
	var ans struct{ Jobs []worker.Job }
	wait.For(t, runWithin, 0, "a job to claim by hand", func() bool {
		if s := n.do(http.MethodPost, "/api/_workers/claim", map[string]any{"queues": []string{queue}, "max": 1, "waitMs": 1000}, &ans); s != http.StatusOK {
			t.Fatalf("claim: %d", s)
		}
		return len(ans.Jobs) == 1
	})
	return ans.Jobs[0]
}

// 7. A lease that expires and is redelivered: on the embedded store, and
// across two nqd instances sharing a Redis, where the worker that dies
// claimed from one instance and the SDK's worker takes the job from the
// other.
func TestLeaseExpiresAndIsRedelivered(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		n := startNQD(t, "NQ_JOB_LEASE=1s")
		leaseRedelivered(t, n, n)
	})
	t.Run("redis", func(t *testing.T) {
		env := []string{"NQ_JOB_LEASE=1s", "NQ_REDIS_URL=redis://" + redistest.Addr(t), "NQ_PREFIX=" + redistest.Prefix(t)}
		leaseRedelivered(t, startNQD(t, env...), startNQD(t, env...))
	})
	t.Run("postgres", func(t *testing.T) {
		env := []string{"NQ_JOB_LEASE=1s", "NQ_POSTGRES_URL=" + pgtest.URL(t)}
		leaseRedelivered(t, startNQD(t, env...), startNQD(t, env...))
	})
	// The worker that dies took its job over a channel.
	t.Run("channel", func(t *testing.T) {
		n := startNQD(t, "NQ_JOB_LEASE=1s")
		leaseRedelivered(t, n, n, claimByChannel)
	})
}

// leaseRedelivered: a worker claims on dying (by hand, or with claim) and
// never reports; the SDK's worker on working gets the job again.
func leaseRedelivered(t *testing.T, dying, working *nqd, claim ...func(*testing.T, *nqd, string) worker.Job) {
	dying.putFlow("lost", "entry: work\nsteps:\n  work: {queue: q1, retryPolicy: {attempts: 2}}\n")
	run := dying.start("lost", nil)
	take := claimByHand
	if len(claim) > 0 {
		take = claim[0]
	}
	dead := take(t, dying, "q1")
	attempts := make(chan int, 2)
	runWorker(t, working.base, worker.Config{Queues: []string{"q1"}}, map[string]worker.Handler{
		"work": func(_ context.Context, sc *worker.StepContext) (any, error) {
			attempts <- sc.Attempt()
			return nil, nil
		},
	})
	evs := working.mustComplete(run, runWithin)
	if a := <-attempts; a != 2 || dead.Attempt != 1 {
		t.Errorf("the worker ran attempt %d after the dead one's %d, want 2 after 1", a, dead.Attempt)
	}
	if count(evs, "step.completed") != 1 {
		t.Errorf("events %s", keys(evs))
	}
	path := "/api/_workers/jobs/" + dead.Queue + "/" + dead.ID + "/complete"
	if s := dying.do(http.MethodPost, path, map[string]any{"lease": dead.Lease}, nil); s != http.StatusConflict {
		t.Errorf("complete with the expired lease: %d, want 409", s)
	}
}

// 8. Tokens.
func TestTokens(t *testing.T) {
	const admin, write, read = "admin-secret-0123456789abcdef0123456789", "write-secret-0123456789abcdef0123456789", "read-secret-0123456789abcdef01234567890"
	n := startNQD(t, "NQ_TOKENS=a:admin:"+admin+",w:write:"+write+",r:read:"+read)
	n.admin = admin
	n.putFlow("guarded", "entry: work\nsteps:\n  work: {queue: q1}\n")
	hs := map[string]worker.Handler{"work": func(context.Context, *worker.StepContext) (any, error) { return "done", nil }}

	for _, tc := range []struct {
		name, token string
		status      int
	}{{"no token", "", http.StatusUnauthorized}, {"read token", read, http.StatusForbidden}} {
		_, result := runWorker(t, n.base, worker.Config{Queues: []string{"q1"}, Token: tc.token}, hs)
		select {
		case err := <-result:
			var se *worker.StatusError
			if !errors.As(err, &se) || se.Status != tc.status {
				t.Errorf("%s: Run returned %v, want a %d", tc.name, err, tc.status)
			}
		case <-time.After(runWithin):
			t.Fatalf("%s: Run did not stop on a refused token", tc.name)
		}
	}

	runWorker(t, n.base, worker.Config{Queues: []string{"q1"}, Token: write}, hs)
	n.mustComplete(n.start("guarded", nil), runWithin)
}

// 9. nqd restarted mid-step, nothing lost.
func TestRestartMidStep(t *testing.T) {
	n := startNQD(t)
	n.putFlow("survivor", "entry: first\nsteps:\n  first: {queue: q1, emits: [first.done]}\n  second: {queue: q1, subscribes: [first.done]}\n")
	entered, release := make(chan struct{}), make(chan struct{})
	refused := &refusals{next: http.DefaultTransport}
	runWorker(t, n.base, worker.Config{Queues: []string{"q1"}, Client: &http.Client{Transport: refused}}, map[string]worker.Handler{
		"first": func(_ context.Context, sc *worker.StepContext) (any, error) {
			close(entered)
			<-release
			// nqd is down: the emit and the complete are retried
			// until it is back.
			return "first", sc.Emit("first.done", map[string]any{"ok": true})
		},
		"second": func(context.Context, *worker.StepContext) (any, error) { return "second", nil },
	})
	run := n.start("survivor", nil)
	select {
	case <-entered:
	case <-time.After(runWithin):
		t.Fatal("the step did not start")
	}
	n.kill()
	close(release)
	wait.For(t, runWithin, 5*time.Millisecond, "the step's report to find nqd down", func() bool { return refused.reports.Load() > 0 })
	n.restart()
	evs := n.mustComplete(run, runWithin)
	if count(evs, "step.completed first") != 1 || count(evs, "step.completed second") != 1 || count(evs, "emit first") != 1 || count(evs, "step.failed") != 0 {
		t.Errorf("events %s, want each step completed once and no failure", keys(evs))
	}
}

// refusals counts the reports that got no answer: events calls and
// completions (which carry an emit made in the step's first moment).
type refusals struct {
	next    http.RoundTripper
	reports atomic.Int32
}

func (r *refusals) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := r.next.RoundTrip(req)
	if err != nil && (strings.HasSuffix(req.URL.Path, "/events") || strings.HasSuffix(req.URL.Path, "/complete")) {
		r.reports.Add(1)
	}
	return res, err
}

// 10. A busy worker: one slot, steps longer than the lease, more runs than
// slots. A job held without a heartbeat would expire and fail its run.
func TestBusyWorker(t *testing.T) {
	// A lease of several heartbeats, so a slow machine does not lose it.
	n := startNQD(t, "NQ_JOB_LEASE=1500ms")
	n.putFlow("slow", "entry: work\nsteps:\n  work: {queue: q1}\n")
	runWorker(t, n.base, worker.Config{Queues: []string{"q1"}, Concurrency: 1}, map[string]worker.Handler{
		"work": func(ctx context.Context, _ *worker.StepContext) (any, error) {
			select {
			case <-time.After(1800 * time.Millisecond): // longer than the lease
				return "done", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	})
	runs := []string{n.start("slow", nil), n.start("slow", nil), n.start("slow", nil)}
	for _, run := range runs {
		evs := n.mustComplete(run, runWithin)
		for _, e := range evs {
			if e.Kind == "step.completed" && e.Attempt != 1 {
				t.Errorf("run %s completed on attempt %d, want 1", run, e.Attempt)
			}
		}
		if count(evs, "step.failed") != 0 {
			t.Errorf("run %s: %s", run, keys(evs))
		}
	}
}

// 11. Graceful stop: a step still running after the grace period is failed
// as retriable at once, not left to its lease; nothing more is claimed.
func TestGracefulStop(t *testing.T) {
	n := startNQD(t) // the default lease, 30 s: the failure must come sooner
	n.putFlow("long", "entry: work\nsteps:\n  work: {queue: q1, retryPolicy: {attempts: 2, backoff: {type: fixed, delayMs: 60000}}}\n")
	entered := make(chan string, 2)
	testDone := make(chan struct{})
	t.Cleanup(func() { close(testDone) })
	stop, result := runWorker(t, n.base, worker.Config{Queues: []string{"q1"}, Concurrency: 1, Grace: 2 * time.Second}, map[string]worker.Handler{
		"work": func(_ context.Context, sc *worker.StepContext) (any, error) {
			entered <- sc.Job.RunID
			<-testDone // a step that ignores its context
			return nil, nil
		},
	})
	first := n.start("long", nil)
	second := n.start("long", nil)
	running := <-entered
	stop()
	select {
	case err := <-result:
		if err != nil {
			t.Errorf("Run returned %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the grace period")
	}
	evs := n.events(running)
	if count(evs, "step.failed") != 1 || !strings.Contains(string(find(evs, "step.failed").Data), `"willRetry":true`) {
		t.Errorf("the running step: %s, want one retriable step.failed", keys(evs))
	}
	other := second
	if running == second {
		other = first
	}
	if count(n.events(other), "step.started") != 0 {
		t.Errorf("run %s was started after the stop", other)
	}
}

func find(evs []runEvent, kind string) runEvent {
	for _, e := range evs {
		if e.Kind == kind {
			return e
		}
	}
	return runEvent{}
}

// A Config without a usable address or without queues is refused at once.
func TestConfigRequired(t *testing.T) {
	for _, cfg := range []worker.Config{
		{Queues: []string{"q1"}},
		{BaseURL: "127.0.0.1:8080", Queues: []string{"q1"}},
		{BaseURL: "http://127.0.0.1:1"},
	} {
		if err := worker.Run(t.Context(), cfg, nil); err == nil {
			t.Errorf("Run(%+v) = nil, want an error", cfg)
		}
	}
}

// 12. Repeated reports answer as the first did and store nothing new.
func TestRepeatedReports(t *testing.T) {
	n := startNQD(t)
	n.putFlow("again", "entry: work\nsteps:\n  work: {queue: q1}\n")
	run := n.start("again", nil)
	j := claimByHand(t, n, "q1")
	base := "/api/_workers/jobs/" + j.Queue + "/" + j.ID
	report := func() int {
		req, _ := http.NewRequest(http.MethodPost, n.base+base+"/events",
			strings.NewReader(fmt.Sprintf(`{"lease":%q,"events":[{"kind":"log","data":{"msg":"once"}}]}`, j.Lease)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "report-1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		return res.StatusCode
	}
	for range 2 {
		if s := report(); s != http.StatusOK {
			t.Fatalf("events: %d", s)
		}
	}
	for range 2 {
		if s := n.do(http.MethodPost, base+"/complete", map[string]any{"lease": j.Lease, "result": 1}, nil); s != http.StatusOK {
			t.Fatalf("complete: %d, want 200 each time", s)
		}
	}
	evs := n.mustComplete(run, runWithin)
	if count(evs, "log") != 1 || count(evs, "step.completed") != 1 || count(evs, "flow.completed") != 1 {
		t.Errorf("events %s, want one log, one step.completed", keys(evs))
	}
}

// 13. Lost answers: every report reaches nqd but its first answer is lost
// (a 502 from a proxy in front); the retries store nothing twice.
func TestLostAnswers(t *testing.T) {
	n := startNQD(t)
	n.putFlow("lossy", "entry: work\nsteps:\n  work: {queue: q1, emits: [done]}\n  next: {queue: q1, subscribes: [done]}\n")
	target, err := url.Parse(n.base)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	seen := map[string]bool{} // report bodies whose answer was dropped once
	var dropped atomic.Int32
	proxy.ModifyResponse = func(res *http.Response) error {
		if !strings.Contains(res.Request.URL.Path, "/api/_workers/jobs/") || strings.HasSuffix(res.Request.URL.Path, "/heartbeat") {
			return nil
		}
		key := res.Request.URL.Path + " " + res.Request.Header.Get("Idempotency-Key")
		mu.Lock()
		defer mu.Unlock()
		if seen[key] {
			return nil
		}
		seen[key] = true
		dropped.Add(1)
		return errors.New("answer lost")
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	runWorker(t, srv.URL, worker.Config{Transport: worker.HTTP, Queues: []string{"q1"}}, map[string]worker.Handler{
		"work": func(_ context.Context, sc *worker.StepContext) (any, error) {
			if err := sc.Log("info", "once"); err != nil {
				return nil, err
			}
			return nil, sc.Emit("done", 1)
		},
		"next": func(context.Context, *worker.StepContext) (any, error) { return "ok", nil },
	})
	run := n.start("lossy", nil)
	evs := n.mustComplete(run, runWithin)
	if count(evs, "log") != 1 || count(evs, "emit") != 1 || count(evs, "step.started") != 2 || count(evs, "step.completed") != 2 {
		t.Errorf("events %s, want each once per step", keys(evs))
	}
	// The run can be seen complete before the proxy has dropped the answer to
	// the report that completed it, so wait for the count rather than read it:
	// the log and the emit go in one events call or two, then each step's
	// completion.
	wait.For(t, runWithin, 10*time.Millisecond, "every report's first answer dropped", func() bool { return dropped.Load() >= 3 })
}

// 14. A busy nqd: the first answer to each report is a 503 or a 429 with
// Retry-After, and nothing was stored; the worker waits and tries again.
func TestBusyServer(t *testing.T) {
	n := startNQD(t)
	n.putFlow("busy", "entry: work\nsteps:\n  work: {queue: q1}\n")
	target, err := url.Parse(n.base)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var refused sync.Map
	var count503, count429 atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		if _, again := refused.LoadOrStore(path, true); !again {
			switch {
			case strings.HasSuffix(path, "/events"):
				count429.Add(1)
				w.Header().Set("Retry-After", "1")
				http.Error(w, `{"error":{"code":"rate_limited","message":"Slow down."}}`, http.StatusTooManyRequests)
				return
			case strings.HasSuffix(path, "/complete"):
				count503.Add(1)
				http.Error(w, `{"error":{"code":"unavailable","message":"Try again."}}`, http.StatusServiceUnavailable)
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	runWorker(t, srv.URL, worker.Config{Transport: worker.HTTP, Queues: []string{"q1"}}, map[string]worker.Handler{
		"work": func(_ context.Context, sc *worker.StepContext) (any, error) {
			return "ok", sc.Log("info", "through a busy server")
		},
	})
	evs := n.mustComplete(n.start("busy", nil), runWithin)
	if count(evs, "log") != 1 || count(evs, "step.completed") != 1 || count429.Load() != 1 || count503.Load() != 1 {
		t.Errorf("events %s after %d 429s and %d 503s, want one log and one completion after one of each", keys(evs), count429.Load(), count503.Load())
	}
}
