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

// frameProxy relays the worker channel to nqd, counting the frames nqd
// sends by type and the completions that ask for their next job in the
// ack; with older it takes nextInAck out of the welcome, as an nqd without
// it would send. Every other call goes to nqd as it is.
type frameProxy struct {
	older bool

	mu        sync.Mutex
	sent      map[string]int // frames nqd sent, by type
	inAckDone int            // complete frames with nextInAck
}

func newFrameProxy(t *testing.T, n *nqd, older bool) (*frameProxy, string) {
	t.Helper()
	target, err := url.Parse(n.base)
	if err != nil {
		t.Fatal(err)
	}
	p := &frameProxy{older: older, sent: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/_workers/channel" {
			rp.ServeHTTP(w, r)
			return
		}
		up, _, err := websocket.Dial(r.Context(), "ws"+strings.TrimPrefix(n.base, "http")+r.URL.Path, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer func() { _ = up.CloseNow() }()
		down, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer func() { _ = down.CloseNow() }()
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		go func() {
			defer cancel()
			p.pump(ctx, down, up, p.fromWorker)
		}()
		p.pump(ctx, up, down, p.fromNQD)
	}))
	t.Cleanup(srv.Close)
	return p, srv.URL
}

// pump relays from's frames to to, each through edit, until either ends.
func (p *frameProxy) pump(ctx context.Context, from, to *websocket.Conn, edit func([]byte) []byte) {
	for {
		typ, b, err := from.Read(ctx)
		if err != nil {
			return
		}
		if err := to.Write(ctx, typ, edit(b)); err != nil {
			return
		}
	}
}

func (p *frameProxy) fromWorker(b []byte) []byte {
	var f map[string]any
	if json.Unmarshal(b, &f) == nil && f["type"] == "complete" && f["nextInAck"] == true {
		p.mu.Lock()
		p.inAckDone++
		p.mu.Unlock()
	}
	return b
}

func (p *frameProxy) fromNQD(b []byte) []byte {
	var f map[string]any
	if json.Unmarshal(b, &f) != nil {
		return b
	}
	typ, _ := f["type"].(string)
	p.mu.Lock()
	p.sent[typ]++
	p.mu.Unlock()
	if typ == "welcome" && p.older {
		delete(f, "nextInAck")
		b, _ = json.Marshal(f)
	}
	return b
}

func (p *frameProxy) counts() (offers, inAckDones int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent["offer"], p.inAckDone
}

// 24. A completion's ack brings the slot's next job: with one slot and
// runs waiting, nqd offers the first job and each completion's ack the
// next, so the channel carries one frame per job. A worker of an nqd whose
// welcome does not say nextInAck sends none and takes its jobs in offers.
func TestCompletionAckBringsNextJob(t *testing.T) {
	if transportForced() {
		t.Skip("a channel scenario")
	}
	for _, older := range []bool{false, true} {
		t.Run(map[bool]string{false: "nextInAck", true: "older nqd"}[older], func(t *testing.T) {
			n := startNQD(t)
			n.putFlow("chain", "entry: work\nsteps:\n  work: {queue: q1}\n")
			var runs []string
			for range 5 {
				runs = append(runs, n.start("chain", nil))
			}
			p, base := newFrameProxy(t, n, older)
			runWorker(t, base, worker.Config{Queues: []string{"q1"}, Concurrency: 1},
				map[string]worker.Handler{"work": func(context.Context, *worker.StepContext) (any, error) { return "ok", nil }})
			for _, run := range runs {
				if evs := n.mustComplete(run, runWithin); count(evs, "step.completed") != 1 {
					t.Errorf("run %s: %s", run, keys(evs))
				}
			}
			offers, inAck := p.counts()
			switch {
			case !older && (offers != 1 || inAck < len(runs)):
				t.Errorf("%d offers, %d completions with nextInAck for %d runs waiting; want 1 offer and every completion", offers, inAck, len(runs))
			case older && (offers != len(runs) || inAck != 0):
				t.Errorf("%d offers, %d completions with nextInAck for %d runs waiting; want an offer per job and none", offers, inAck, len(runs))
			}
		})
	}
}
