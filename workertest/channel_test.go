package workertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/sdk/go/worker"
)

// The scenarios of the worker channel (docs/worker-protocol.md, The worker
// channel); the other scenarios run over it too unless NQD_TEST_TRANSPORT
// is "http".

// claimByChannel takes a job of queue over a channel of its own, which
// then drops without a word: a worker killed mid-step.
func claimByChannel(t *testing.T, n *nqd, queue string) worker.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), runWithin)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(n.base, "http")+"/api/_workers/channel", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ws.CloseNow() }()
	hello := `{"type":"hello","workerId":"dying","queues":["` + queue + `"],"concurrency":1}`
	if err := ws.Write(ctx, websocket.MessageText, []byte(hello)); err != nil {
		t.Fatal(err)
	}
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("no job offered: %v", err)
		}
		var f struct {
			Type string
			Jobs []worker.Job
		}
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		if f.Type == "offer" {
			return f.Jobs[0]
		}
	}
}

// cutter is a TCP proxy before nqd that can cut every connection through
// it at once: a network that drops the worker's channel.
type cutter struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newCutter(t *testing.T, target string) *cutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{ln: ln}
	t.Cleanup(func() { _ = ln.Close(); c.cut() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
		}
	}()
	return c
}

func (c *cutter) base() string { return "http://" + c.ln.Addr().String() }

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
}

// channelsOpened reads nqd_worker_channels_opened_total from n's metrics.
func channelsOpened(t *testing.T, n *nqd) int {
	t.Helper()
	res, err := http.Get(n.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "nqd_worker_channels_opened_total "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return int(f)
		}
	}
	return 0
}

// 22. A channel dropped with jobs in flight: the step's reports go on
// under the same lease, the run completes on attempt 1, and the worker
// takes new jobs over a new channel.
func TestChannelDroppedWithJobsInFlight(t *testing.T) {
	if transportForced() {
		t.Skip("a channel scenario")
	}
	n := startNQD(t)
	n.putFlow("one", "entry: work\nsteps:\n  work: {queue: q1}\n")
	proxy := newCutter(t, n.addr)
	entered, release := make(chan struct{}, 2), make(chan struct{})
	runWorker(t, proxy.base(), worker.Config{Queues: []string{"q1"}}, map[string]worker.Handler{
		"work": func(_ context.Context, sc *worker.StepContext) (any, error) {
			entered <- struct{}{}
			if sc.Attempt() != 1 {
				return nil, errors.New("a second attempt")
			}
			<-release
			_ = sc.Log("info", "after the drop")
			return "done", nil
		},
	})
	run := n.start("one", nil)
	<-entered
	proxy.cut()
	close(release)
	evs := n.mustComplete(run, runWithin)
	if count(evs, "step.completed") != 1 || count(evs, "log") != 1 || count(evs, "step.failed") != 0 {
		t.Errorf("run %s: %s", run, keys(evs))
	}
	evs = n.mustComplete(n.start("one", nil), runWithin)
	if count(evs, "step.completed") != 1 {
		t.Errorf("the run after the drop: %s", keys(evs))
	}
	wait.For(t, runWithin, 20*time.Millisecond, "a second channel", func() bool { return channelsOpened(t, n) >= 2 })
}

// 23. No channel: a proxy answers the channel's upgrade with 404, and the
// worker takes its jobs over HTTP.
func TestNoChannelFallsBackToHTTP(t *testing.T) {
	if transportForced() {
		t.Skip("a channel scenario")
	}
	n := startNQD(t)
	n.putFlow("one", "entry: work\nsteps:\n  work: {queue: q1}\n")
	target, err := url.Parse(n.base)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/_workers/channel" {
			http.NotFound(w, r)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	runWorker(t, srv.URL, worker.Config{Queues: []string{"q1"}}, map[string]worker.Handler{
		"work": func(context.Context, *worker.StepContext) (any, error) { return "done", nil },
	})
	evs := n.mustComplete(n.start("one", nil), runWithin)
	if count(evs, "step.completed") != 1 {
		t.Errorf("events %s", keys(evs))
	}
	if c := channelsOpened(t, n); c != 0 {
		t.Errorf("%d channels opened; want none", c)
	}
}

// transportForced reports whether the suite runs over HTTP only.
func transportForced() bool { return os.Getenv(transportEnv) == "http" }
