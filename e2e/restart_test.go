package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/internal/pgtest"
	"github.com/nqd-dev/nqd/internal/redistest"
	testspawn "github.com/nqd-dev/nqd/internal/spawn"
	"github.com/nqd-dev/nqd/sdk/go/worker"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// TestMain removes the nqd binary the restart tests build.
func TestMain(m *testing.M) {
	code := m.Run()
	if binary != "" {
		_ = os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}

// serverBinary builds ./cmd/server once per test binary, in a directory a
// later run removes should this one be cut short before TestMain's cleanup.
func serverBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := testspawn.OwnedTempDir("nqd-e2e-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "nqd")
		out, err := exec.Command("go", "build", "-o", binary, "../cmd/server").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("%v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build nqd: %v", buildErr)
	}
	return binary
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// process is nqd running as a child process.
type process struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan struct{}
}

// spawn starts nqd with env and waits until it answers /healthz.
func spawn(t *testing.T, addr string, env []string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(serverBinary(t)), out: &bytes.Buffer{}, done: make(chan struct{})}
	flows, err := filepath.Abs("../examples/flows")
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Env = append(os.Environ(), "NQ_ADDR="+addr, "NQ_FLOWS_DIR="+flows, "NQ_RATE_PER_ADDR=0", "NQ_LOG_LEVEL=warn", "NQ_LOG_FORMAT=json")
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("nqd output:\n%s", p.out)
		}
	})
	waitFor(t, 30*time.Second, "nqd to answer", func() bool {
		select {
		case <-p.done:
			t.Fatalf("nqd exited: %s", p.out)
		default:
		}
		res, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	return p
}

// kill ends the process with SIGKILL: no shutdown code runs.
func (p *process) kill(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("nqd did not die")
	}
}

// TestKillAndRestart: nqd dies by SIGKILL while a step runs and comes back
// on the same store. The worker finishes the step against the new process,
// dispatch resumes, and every step has run exactly once.
func TestKillAndRestart(t *testing.T) {
	for _, backend := range []struct {
		name string
		env  func(t *testing.T) []string
	}{
		{"bolt", func(t *testing.T) []string { return []string{"NQ_DATA_DIR=" + t.TempDir()} }},
		{"redis", func(t *testing.T) []string {
			return []string{"NQ_REDIS_URL=redis://" + redistest.Addr(t), "NQ_PREFIX=" + redistest.Prefix(t)}
		}},
		{"postgres", func(t *testing.T) []string { return []string{"NQ_POSTGRES_URL=" + pgtest.URL(t)} }},
	} {
		t.Run(backend.name, func(t *testing.T) {
			env := backend.env(t)
			addr := freeAddr(t)
			base := "http://" + addr
			first := spawn(t, addr, env)

			var mu sync.Mutex
			ran := map[string]int{}
			entered, release := make(chan struct{}), make(chan struct{})
			var enter sync.Once
			handlers := demoHandlers()
			for _, step := range []string{"ingest", "transform", "publish"} {
				h := handlers[step]
				handlers[step] = func(ctx context.Context, sc *worker.StepContext) (any, error) {
					mu.Lock()
					ran[step]++
					mu.Unlock()
					if step == "transform" {
						enter.Do(func() { close(entered) })
						// The worker's end releases it too, so that a test
						// that fails early ends instead of hanging.
						select {
						case <-release:
						case <-ctx.Done():
							return nil, ctx.Err()
						}
					}
					return h(ctx, sc)
				}
			}
			// A kept-alive connection to the killed process can fail the
			// first report after the restart, and the SDK does not retry
			// reports (a lost complete would rerun the step after its lease):
			// fresh connections keep this test about nqd.
			// The answers are watched on the HTTP client, so the worker
			// reports over HTTP; workertest kills nqd under a worker on
			// the worker channel.
			answers := &completionAnswers{next: &http.Transport{DisableKeepAlives: true}, steps: map[string]int{}}
			client := &http.Client{Transport: answers}
			startWorkerWith(t, worker.Config{BaseURL: base, Concurrency: 4, Client: client, Transport: worker.HTTP}, handlers)
			run := startRun(t, base, "pipeline", nil)
			var last []string // the run's events at the last look, for a failure's log
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("the run's events at the last look: %v", last)
				}
			})
			select {
			case <-entered:
			case <-time.After(30 * time.Second):
				t.Fatal("transform never ran")
			}
			// transform starts on ingest's emit, possibly before ingest's
			// complete has reached nqd. The kill must find transform held in
			// its handler and nothing else of the run in flight: a report
			// that the kill cuts off is the SDK's to retry, and this test is
			// about what nqd keeps across the kill, not about that retry.
			waitFor(t, 30*time.Second, "ingest's step.completed before the kill", func() bool {
				last = events(t, base, run).kinds()
				return count(last, "step.completed ingest") == 1
			})
			// A completion's answer may wait a little for the worker's next
			// job after the step is stored.
			waitFor(t, 30*time.Second, "ingest's completion answered before the kill", func() bool { return answers.answered("ingest") })

			first.kill(t)
			spawn(t, addr, env)
			close(release)
			waitFor(t, 90*time.Second, "the run to complete after the restart", func() bool {
				last = events(t, base, run).kinds()
				if count(last, "flow.failed") > 0 {
					t.Fatalf("the run failed after the restart: %v", last)
				}
				return count(last, "flow.completed") == 1
			})

			// The worker stops after nqd does at the end of the test, so its
			// last completion must have been answered by then.
			waitFor(t, 30*time.Second, "publish's completion answered", func() bool { return answers.answered("publish") })
			if n := runs(t, base, "pipeline", "completed", 0, 1).Total; n != 1 {
				t.Errorf("completed runs of pipeline: %d, want 1", n)
			}
			mu.Lock()
			defer mu.Unlock()
			if ran["ingest"] != 1 || ran["transform"] != 1 || ran["publish"] != 1 {
				t.Errorf("steps ran %v, want each once", ran)
			}
			k := events(t, base, run).kinds()
			for _, step := range []string{"ingest", "transform", "publish"} {
				if n := count(k, "step.completed "+step); n != 1 {
					t.Errorf("step.completed %s %d times in %v", step, n, k)
				}
			}
			if count(k, "flow.completed") != 1 || k[len(k)-1] != "flow.completed" {
				t.Errorf("events = %v, want one flow.completed, last", k)
			}
		})
	}
}

// completionAnswers records, by step, the completions nqd answered.
type completionAnswers struct {
	next  http.RoundTripper
	mu    sync.Mutex
	steps map[string]int
}

func (c *completionAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusOK {
		if job, ok := strings.CutSuffix(req.URL.Path, "/complete"); ok {
			_, step, _ := strings.Cut(path.Base(job), ":")
			c.mu.Lock()
			c.steps[step]++
			c.mu.Unlock()
		}
	}
	return resp, err
}

func (c *completionAnswers) answered(step string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.steps[step] > 0
}
