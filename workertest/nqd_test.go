package workertest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/internal/spawn"
	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/sdk/go/worker"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// nqdBinary builds ./cmd/server once per test binary, so the SDK is tested
// against the server of the same tree.
func nqdBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := spawn.OwnedTempDir("nqd-worker-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "nqd")
		if out, err := exec.Command("go", "build", "-o", binary, "../cmd/server").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("%v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build nqd: %v", buildErr)
	}
	return binary
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binary != "" {
		_ = os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}

// nqd is the server binary running as a child process on a port and data
// directory of its own.
type nqd struct {
	t     *testing.T
	addr  string
	base  string
	env   []string
	admin string // token for setting up flows, when the server has tokens

	mu   sync.Mutex
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan struct{}
}

// startNQD starts nqd on the embedded store with env added to its
// environment, and waits until it answers.
func startNQD(t *testing.T, env ...string) *nqd {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	n := &nqd{t: t, addr: addr, base: "http://" + addr,
		env: append([]string{"NQ_ADDR=" + addr, "NQ_DATA_DIR=" + t.TempDir(), "NQ_LOG_LEVEL=warn", "NQ_LOG_FORMAT=json", "NQ_RATE_PER_ADDR=0"}, env...)}
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			t.Logf("nqd output:\n%s", n.output())
		}
	})
	n.launch()
	return n
}

func (n *nqd) launch() {
	n.t.Helper()
	cmd := exec.Command(nqdBinary(n.t))
	cmd.Env = append(os.Environ(), n.env...)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	n.mu.Lock()
	n.cmd, n.out, n.done = cmd, out, done
	n.mu.Unlock()
	wait.For(n.t, 30*time.Second, 10*time.Millisecond, "nqd to answer", func() bool {
		select {
		case <-done:
			n.t.Fatalf("nqd exited: %s", n.output())
		default:
		}
		res, err := http.Get(n.base + "/healthz")
		if err != nil {
			return false
		}
		_ = res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
}

// kill ends nqd with SIGKILL: no shutdown code runs.
func (n *nqd) kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// restart starts nqd again on the same address and data directory.
func (n *nqd) restart() {
	n.t.Helper()
	n.launch()
}

func (n *nqd) output() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.out == nil {
		return ""
	}
	return n.out.String()
}

// do sends a request with body (JSON unless it is a string, sent as
// YAML) and decodes a 2xx answer into out; it returns the status.
func (n *nqd) do(method, path string, body, out any) int {
	n.t.Helper()
	var r io.Reader
	ct := "application/json"
	switch b := body.(type) {
	case nil:
	case string:
		r, ct = strings.NewReader(b), "application/yaml"
	default:
		j, err := json.Marshal(b)
		if err != nil {
			n.t.Fatal(err)
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, n.base+path, r)
	if err != nil {
		n.t.Fatal(err)
	}
	if r != nil {
		req.Header.Set("Content-Type", ct)
	}
	if n.admin != "" {
		req.Header.Set("Authorization", "Bearer "+n.admin)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		n.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode/100 == 2 && out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			n.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return res.StatusCode
}

// putFlow stores the flow definition def (YAML) as name.
func (n *nqd) putFlow(name, def string) {
	n.t.Helper()
	if s := n.do(http.MethodPut, "/api/_flows/"+name, def, nil); s != http.StatusOK {
		n.t.Fatalf("PUT flow %s: %d", name, s)
	}
}

// start starts a run of flow with input and returns its id.
func (n *nqd) start(flow string, input any) string {
	n.t.Helper()
	if input == nil {
		input = map[string]any{}
	}
	var ans struct{ FlowID string }
	if s := n.do(http.MethodPost, "/api/_flows/"+flow+"/start", input, &ans); s != http.StatusOK || ans.FlowID == "" {
		n.t.Fatalf("start %s: %d %+v", flow, s, ans)
	}
	return ans.FlowID
}

// runEvent is an event of a run as the API answers it.
type runEvent struct {
	Kind    string          `json:"kind"`
	Step    string          `json:"step"`
	Attempt int             `json:"attempt"`
	Data    json.RawMessage `json:"data"`
}

func (e runEvent) key() string {
	if e.Step == "" {
		return e.Kind
	}
	return e.Kind + " " + e.Step
}

// events reads the run's events, oldest first.
func (n *nqd) events(run string) []runEvent {
	n.t.Helper()
	var ans struct{ Events []runEvent }
	if s := n.do(http.MethodGet, "/api/_events/flow/"+run+"?limit=10000", nil, &ans); s != http.StatusOK {
		n.t.Fatalf("events of %s: %d", run, s)
	}
	return ans.Events
}

// count is how many of evs have key kind, or "kind step".
func count(evs []runEvent, key string) int {
	c := 0
	for _, e := range evs {
		if e.key() == key || e.Kind == key {
			c++
		}
	}
	return c
}

// waitEnd waits until the run has ended and says how: flow.completed,
// flow.failed or flow.cancelled.
func (n *nqd) waitEnd(run string, within time.Duration) string {
	n.t.Helper()
	var end string
	wait.For(n.t, within, 20*time.Millisecond, "run "+run+" to end", func() bool {
		for _, e := range n.events(run) {
			if e.Kind == "flow.completed" || e.Kind == "flow.failed" || e.Kind == "flow.cancelled" {
				end = e.Kind
				return true
			}
		}
		return false
	})
	return end
}

// mustComplete waits for the run to complete, failing with its events
// when it ends otherwise.
func (n *nqd) mustComplete(run string, within time.Duration) []runEvent {
	n.t.Helper()
	if end := n.waitEnd(run, within); end != "flow.completed" {
		n.t.Fatalf("run %s ended with %s: %s", run, end, keys(n.events(run)))
	}
	return n.events(run)
}

func keys(evs []runEvent) string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.key()
	}
	return strings.Join(out, ", ")
}

// transportEnv forces the HTTP transport on every scenario when set to
// "http": make test runs the suite once over each transport.
const transportEnv = "NQD_TEST_TRANSPORT"

// runWorker runs the SDK with cfg against nqd at base until the test ends;
// the returned channel gets Run's error when it returns.
func runWorker(t *testing.T, base string, cfg worker.Config, handlers map[string]worker.Handler) (stop context.CancelFunc, result <-chan error) {
	t.Helper()
	cfg.BaseURL = base
	if os.Getenv(transportEnv) == "http" {
		cfg.Transport = worker.HTTP
	}
	cfg.Logger = slog.New(slog.NewTextHandler(zerolog.NewTestWriter(t), &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		errc <- worker.Run(ctx, cfg, handlers)
	}()
	t.Cleanup(func() {
		cancel()
		// Run returns within its grace period; the slack is for a machine
		// under load, the bound for a worker that hangs.
		grace := cfg.Grace
		if grace == 0 {
			grace = worker.DefaultGrace
		}
		select {
		case <-done:
		case <-time.After(grace + 10*time.Second):
			t.Errorf("the worker did not stop within its grace period (%v)", grace)
		}
	})
	return cancel, errc
}
