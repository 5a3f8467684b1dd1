package workertest_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nqd-dev/nqd/sdk/go/worker"
)

// callCounter counts the worker's claim calls and its completions that
// carry a claim, on their way to nqd.
type callCounter struct {
	next                  http.RoundTripper
	claims, claimingDones atomic.Int32
	// waitingDones counts the completions whose claim may wait.
	waitingDones atomic.Int32
}

func (c *callCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, "/api/_workers/claim") {
		c.claims.Add(1)
	}
	if strings.HasSuffix(req.URL.Path, "/complete") && req.Body != nil {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		if bytes.Contains(b, []byte(`"claim"`)) {
			c.claimingDones.Add(1)
		}
		if bytes.Contains(b, []byte(`"waitMs":`)) && !bytes.Contains(b, []byte(`"waitMs":0`)) {
			c.waitingDones.Add(1)
		}
	}
	return c.next.RoundTrip(req)
}

// A busy worker takes its next job from each completion's answer: with one
// slot and runs waiting, it claims on its own only for the first job and
// once the queue is empty.
func TestCompletionClaimsNext(t *testing.T) {
	n := startNQD(t)
	n.putFlow("chain", "entry: work\nsteps:\n  work: {queue: q1}\n")
	var runs []string
	for range 5 {
		runs = append(runs, n.start("chain", nil))
	}
	calls := &callCounter{next: http.DefaultTransport}
	runWorker(t, n.base, worker.Config{Transport: worker.HTTP, Queues: []string{"q1"}, Concurrency: 1, Client: &http.Client{Transport: calls}},
		map[string]worker.Handler{"work": func(context.Context, *worker.StepContext) (any, error) { return "ok", nil }})
	for _, run := range runs {
		evs := n.mustComplete(run, runWithin)
		if count(evs, "step.completed") != 1 {
			t.Errorf("run %s: %s", run, keys(evs))
		}
	}
	// The fifth completion finds nothing, and a claim waits for more.
	if c := calls.claims.Load(); c > 2 {
		t.Errorf("%d claim calls for %d runs waiting; want the first and one after the last", c, len(runs))
	}
	if d := calls.claimingDones.Load(); d != int32(len(runs)) {
		t.Errorf("%d completions claimed; want %d", d, len(runs))
	}
}

// With nothing waiting (each run starts once the last one is done),
// completions still claim, and their claims wait a little for the next run:
// one started meanwhile through the same nqd is handed to the completion.
func TestCompletionClaimWaitsWithoutBacklog(t *testing.T) {
	n := startNQD(t)
	n.putFlow("chain", "entry: work\nsteps:\n  work: {queue: q1}\n")
	calls := &callCounter{next: http.DefaultTransport}
	runWorker(t, n.base, worker.Config{Transport: worker.HTTP, Queues: []string{"q1"}, Concurrency: 4, Client: &http.Client{Transport: calls}},
		map[string]worker.Handler{"work": func(context.Context, *worker.StepContext) (any, error) { return "ok", nil }})
	for range 4 {
		n.mustComplete(n.start("chain", nil), runWithin)
	}
	if d := calls.claimingDones.Load(); d != 4 {
		t.Errorf("%d of 4 completions claimed; want all", d)
	}
	if w := calls.waitingDones.Load(); w != 4 {
		t.Errorf("%d of 4 completions' claims waited; want all", w)
	}
}

// Once nqd refuses the worker's claims for good, the completions of the
// jobs still running ask for no next job either.
func TestCompletionsStopClaimingWithTheWorker(t *testing.T) {
	n := startNQD(t)
	n.putFlow("chain", "entry: work\nsteps:\n  work: {queue: q1}\n")
	run := n.start("chain", nil)
	target, err := url.Parse(n.base)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var claims atomic.Int32
	var claimingDones atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/api/_workers/claim") && claims.Add(1) > 1:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"error":{"code":"forbidden","message":"The token may not claim."}}`)
			return
		case strings.HasSuffix(r.URL.Path, "/complete"):
			b, _ := io.ReadAll(r.Body)
			if bytes.Contains(b, []byte(`"claim"`)) {
				claimingDones.Add(1)
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	// The handler returns once the worker has said it stops claiming.
	stopped := make(chan struct{})
	logs := &noticeHandler{msg: "nqd refused the worker; stopping", seen: stopped}
	result := make(chan error, 1)
	go func() {
		result <- worker.Run(context.Background(), worker.Config{
			BaseURL: srv.URL, Transport: worker.HTTP, Queues: []string{"q1"}, Concurrency: 2, Logger: slog.New(logs),
		}, map[string]worker.Handler{"work": func(context.Context, *worker.StepContext) (any, error) {
			<-stopped
			return "ok", nil
		}})
	}()
	evs := n.mustComplete(run, runWithin)
	if count(evs, "step.completed") != 1 {
		t.Errorf("run %s: %s", run, keys(evs))
	}
	if err := <-result; err == nil {
		t.Error("Run returned nil; want the refused claim")
	}
	if d := claimingDones.Load(); d != 0 {
		t.Errorf("%d completions asked for a next job after the claims were refused; want none", d)
	}
}

// noticeHandler closes seen the first time msg is logged.
type noticeHandler struct {
	msg  string
	seen chan struct{}
	once sync.Once
}

func (h *noticeHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *noticeHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *noticeHandler) WithGroup(string) slog.Handler            { return h }

func (h *noticeHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.seen) })
	}
	return nil
}
