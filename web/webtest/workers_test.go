package webtest

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDashboardWorkers runs the demo worker (cmd/demo-worker, Go) and a
// TypeScript worker (the nqd-worker command of sdk/typescript) against nqd,
// sees both on the Workers page side by side, sees a queue whose jobs wait
// with no worker flagged, and sees the TypeScript worker shown left once
// it stops, without reloading the page.
func TestDashboardWorkers(t *testing.T) {
	needChromium(t)
	cli := tsWorkerCommand(t)
	srv := startServer(t, nil)

	demo := filepath.Join(t.TempDir(), "demo-worker")
	build := exec.Command("go", "build", "-o", demo, "./cmd/demo-worker")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the demo worker: %v\n%s", err, out)
	}
	startProcess(t, exec.Command(demo, "-url", srv.URL, "-queues", "default", "-concurrency", "4"))

	steps := t.TempDir()
	step := `export const config = defineQueueConfig({
  queue: { name: 'ts-q' },
  flow: { name: ['ts-flow'], role: 'entry', step: 'hello' },
})
export default defineQueueWorker(async () => ({ ok: true }))
`
	if err := os.WriteFile(filepath.Join(steps, "hello.js"), []byte(step), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := startProcess(t, exec.Command("node", cli, steps, "--url", srv.URL, "--concurrency", "2"))

	// A flow on a queue no worker serves, with a run waiting on it.
	putFlow(t, srv.URL, "nobody-flow", `{"entry":"wait","steps":{"wait":{"queue":"nobody"}}}`)
	var started struct{ FlowID string }
	postJSON(t, srv.URL+"/api/_flows/nobody-flow/start", `{}`, &started)

	b := newBrowser(t)
	b.do(t, chromedp.Navigate(srv.URL+"/workers"))
	b.waitJS(t, `document.querySelector('nav a[data-section="workers"]').getAttribute('aria-current') === 'page'`)
	b.waitJS(t, `document.querySelector('tr[data-sdk="go"][data-status="active"]') !== null`)
	b.waitJS(t, `document.querySelector('tr[data-sdk="typescript"][data-status="active"]') !== null`)
	b.waitJS(t, `document.querySelector('tr[data-sdk="go"] [data-count="concurrency"]').textContent === '4'`)
	b.waitJS(t, `document.querySelector('tr[data-sdk="typescript"]').textContent.includes('ts-q')`)
	b.waitJS(t, `document.querySelector('[data-unserved]')?.dataset.unserved.split(' ').includes('nobody')`)
	b.waitJS(t, `document.querySelector('.live').textContent === 'live'`)
	b.shot(t, "workers")

	b.do(t, chromedp.Click(chromedp.CSS(`[data-filter="all"]`)))
	if err := ts.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ts.wait(t)
	// The page follows the registry's stream: the departure shows without a reload.
	b.waitJS(t, `document.querySelector('tr[data-sdk="typescript"][data-status="left"]') !== null`)
	b.waitJS(t, `document.querySelector('tr[data-sdk="go"][data-status="active"]') !== null`)

	b.do(t, chromedp.Navigate(srv.URL+"/queues"))
	b.waitJS(t, `document.querySelector('tr[data-queue="nobody"] [data-unserved]') !== null`)
	b.waitJS(t, `document.querySelector('tr[data-queue="default"] [data-count="workers"]')?.textContent === '1'`)
	b.waitJS(t, `document.querySelector('tr[data-queue="default"] [data-unserved]') === null`)
	b.checkConsole(t)
}

// tsWorkerCommand builds the TypeScript SDK and returns its nqd-worker
// command's script. Without node it skips, unless NQD_REQUIRE_NODE=1.
func tsWorkerCommand(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		if os.Getenv("NQD_REQUIRE_NODE") == "1" {
			t.Fatal("NQD_REQUIRE_NODE=1 but node is missing")
		}
		t.Skip("no node: the Workers page test runs a TypeScript worker")
	}
	dir, err := filepath.Abs("../../sdk/typescript")
	if err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v in sdk/typescript: %v\n%s", name, args, err, out)
		}
	}
	// npm writes node_modules/.package-lock.json on every install: older
	// than the lockfile (or missing), the dependencies changed since.
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	if installed, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err != nil || installed.ModTime().Before(lock.ModTime()) {
		run("npm", "ci", "--no-audit", "--no-fund")
	}
	run("node", "node_modules/typescript/bin/tsc", "-p", "tsconfig.json")
	return filepath.Join(dir, "dist", "cli.js")
}

// process is a worker process the test started; its output goes to the
// test's log when the test fails.
type process struct {
	*exec.Cmd
	once sync.Once
	done chan struct{}
	out  bytes.Buffer
}

// startProcess starts cmd and stops it (SIGTERM, then SIGKILL) when the
// test ends.
func startProcess(t *testing.T, cmd *exec.Cmd) *process {
	t.Helper()
	p := &process{Cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		p.wait(t)
		if t.Failed() {
			t.Logf("%s:\n%s", cmd.Path, p.out.String())
		}
	})
	return p
}

// wait waits for the process to end, killing it after 15 s.
func (p *process) wait(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		p.once.Do(func() { t.Errorf("%s did not stop within 15 s of SIGTERM", p.Path) })
		_ = p.Process.Kill()
		<-p.done
	}
}

func putFlow(t *testing.T, base, name, def string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, base+"/api/_flows/"+name, strings.NewReader(def))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		t.Fatalf("PUT flow %s: %d", name, res.StatusCode)
	}
}
