package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/internal/pgtest"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/spawn"
	"github.com/nqd-dev/nqd/wiring"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// TestMain routes go-redis's own log through zerolog, as nqd's main does,
// so that the dial failures of a Redis a test stopped stay out of the
// output (RouteRedisLog logs them at debug level), and removes the nqd binary the
// crash tests build.
func TestMain(m *testing.M) {
	wiring.RouteRedisLog(zerolog.New(os.Stderr).Level(zerolog.InfoLevel))
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// serverBinary builds ./cmd/server once per test binary: a crash is only
// real in a process of its own.
func serverBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := spawn.OwnedTempDir("nqd-faults-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "nqd")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/nqd-dev/nqd/cmd/server").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// process is one nqd child process.
type process struct {
	cmd  *exec.Cmd
	base string
	done chan struct{}

	mu     sync.Mutex
	stdout []string // every line nqd wrote, for tests of its log
	stderr []string
}

// output returns the lines nqd wrote to stdout and stderr so far.
func (p *process) output() (stdout, stderr []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.stdout), slices.Clone(p.stderr)
}

// startProcess runs nqd with env (NQ_* settings; the listen address is
// chosen here) and waits until it answers /healthz.
func startProcess(t *testing.T, env ...string) *process {
	t.Helper()
	cmd := exec.Command(serverBinary(t))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NQ_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "NQ_ADDR=127.0.0.1:0", "NQ_LOG_FORMAT=json", "NQ_LOG_LEVEL=info")
	cmd.Env = append(cmd.Env, env...)
	// A child outliving a killed test binary would hold its files.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			fmt.Fprintln(os.Stderr, sc.Text())
			p.mu.Lock()
			p.stderr = append(p.stderr, sc.Text())
			p.mu.Unlock()
		}
	}()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.stdout = append(p.stdout, sc.Text())
			p.mu.Unlock()
			var line struct {
				Message string `json:"message"`
				Addr    string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == "nqd listening" {
				select {
				case addr <- line.Addr:
				default:
				}
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	select {
	case a := <-addr:
		p.base = "http://" + a
	case <-p.done:
		t.Fatal("nqd exited at start")
	case <-time.After(waitFor):
		t.Fatalf("nqd did not listen within %v", waitFor)
	}
	eventually(t, "nqd answering /healthz", func() bool {
		resp, err := client.Get(p.base + "/healthz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// kill ends the process with SIGKILL, as a crash or the OOM killer would.
func (p *process) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func TestCrash(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		dir := t.TempDir()
		crashUnderLoad(t, "NQ_DATA_DIR="+dir)
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t, redistest.Options{AOF: true})
		crashUnderLoad(t, "NQ_REDIS_URL=redis://"+srv.Addr+"/0")
	})
	t.Run("postgres", func(t *testing.T) {
		crashUnderLoad(t, "NQ_POSTGRES_URL="+pgtest.URL(t))
	})
}

// crashUnderLoad kills nqd with SIGKILL while four clients append, restarts
// it on the same store and checks that no acknowledged event was lost, that
// no batch is half stored, and that retrying the batches that got no answer
// with their Idempotency-Key stores each exactly once.
func crashUnderLoad(t *testing.T, env ...string) {
	p := startProcess(t, env...)
	const writers = 4
	var appenders []*appender
	for i := range writers {
		a := newAppender(p.base, "flow", fmt.Sprintf("crash-%d", i))
		appenders = append(appenders, a)
		go a.run()
	}
	total := func() int {
		n := 0
		for _, a := range appenders {
			n += a.ackedCount()
		}
		return n
	}
	eventually(t, "appends before the crash", func() bool { return total() >= 200 })
	p.kill()
	for _, a := range appenders {
		a.stop()
	}
	acked := total()

	old := p.base
	p = startProcess(t, env...)
	for _, a := range appenders {
		a.url = p.base + strings.TrimPrefix(a.url, old)
		a.mu.Lock()
		failed := a.failed
		a.failed = nil
		a.problems = nil // answers cut by the crash are not the contract's concern
		a.mu.Unlock()
		for _, n := range failed {
			a.post(context.Background(), n)
		}
		a.mu.Lock()
		if len(a.failed) > 0 {
			t.Errorf("%s: retries after the restart failed: %v (statuses %v)", a.url, a.failed, a.statuses)
		}
		a.mu.Unlock()
	}
	for _, a := range appenders {
		checkStream(t, a, readAll(t, a.url))
	}
	t.Logf("%d batches acknowledged before the crash", acked)
}
