// TestNuxtQueueV05UI walks the Nuxt Queue v0.5 UI, built from its public
// source, page by page in headless Chromium with nqd serving its API and
// its WebSockets, and nqd-worker running plain v0.5 step files.
//
// The UI's packages are not on the npm registry, so the test needs a local
// copy of the Nuxt Queue repository (a clone, or its git directory) in
// NQD_NUXT_QUEUE_REPO; it checks out the v0.5.15 tag into a temporary folder,
// installs it with pnpm and builds a small host app there, which takes some
// minutes. Without the variable the test is skipped.
// NQD_NUXT_QUEUE_BUILD names a folder to build in and keep instead, so that a
// second run reuses the installed packages and the build.

package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	testspawn "github.com/nqd-dev/nqd/internal/spawn"
)

// The release whose UI is walked, and the pnpm its lockfile was made with.
const (
	uiTag   = "v0.5.15"
	pnpmPkg = "pnpm@10.20.0"
)

func TestNuxtQueueV05UI(t *testing.T) {
	repo, root := needNuxtQueue(t, "git", "node", "npx", "chromium")
	// nqd forwards what is not its API to the Nuxt app (NQ_UI_UPSTREAM), so
	// the UI and its sockets share one origin; the app starts after the
	// build, which reads the flows from nqd, so its port is chosen now.
	nuxtAddr := freeAddr(t)
	_, nuxtPort, _ := net.SplitHostPort(nuxtAddr)
	nqd, flows := startWithStepFiles(t, root, "-ui-upstream", "http://"+nuxtAddr)

	build := buildUI(t, repo, nqd)
	startNuxt(t, build, nuxtPort, nil)
	front := newFrontProxy(t, nqd)
	b := newBrowser(t)
	page := func(p string) string { return front.URL + "/_nvent" + p }

	t.Run("dashboard", func(t *testing.T) {
		b.nav(t, page(""))
		b.waitText(t, `/Registered Flows/`)
		b.waitText(t, fmt.Sprintf(`/\b%d\s*flows\b/`, flows))
	})

	walkRuns(t, b, front, nqd)

	t.Run("cancel and restart", func(t *testing.T) {
		res := post(t, nqd+"/api/_flows/approval/start", `{"amount":5}`)
		var started struct{ FlowID string }
		if err := json.Unmarshal([]byte(res.body), &started); err != nil || started.FlowID == "" {
			t.Fatalf("start: %d %s", res.status, res.body)
		}
		b.nav(t, page("?p=/flows/approval"))
		b.click(t, "*", "Run "+started.FlowID[:8])
		b.waitText(t, `/awaiting/i`)
		b.click(t, "button", "Cancel")
		waitFor(t, 20*time.Second, "the run canceled", func() bool {
			return runStatus(t, nqd, "approval", started.FlowID) == "canceled"
		})
		b.waitText(t, `/cancel/i`)
		b.click(t, "button", "Restart")
		waitFor(t, 20*time.Second, "a restarted run", func() bool {
			return len(flowRuns(t, nqd, "approval")) == 3
		})
	})

	t.Run("triggers", func(t *testing.T) {
		res := post(t, nqd+"/api/_triggers", `{"name":"greet-hook","type":"webhook","displayName":"Greet hook","config":{},"subscriptions":["hello"]}`)
		if res.status != http.StatusOK || !strings.Contains(res.body, `"success":true`) {
			t.Fatalf("create trigger: %d %s", res.status, res.body)
		}
		b.nav(t, page("?p=/triggers"))
		b.waitText(t, `/Greet hook|greet-hook/`)
		fired := post(t, front.URL+"/api/_webhook/trigger/greet-hook", `{"name":"hook"}`)
		if fired.status != http.StatusOK || !strings.Contains(fired.body, `"success":true`) {
			t.Fatalf("fire trigger: %d %s", fired.status, fired.body)
		}
		waitFor(t, 20*time.Second, "the hook's hello run", func() bool {
			return len(flowRuns(t, nqd, "hello")) == 2
		})
		b.nav(t, page("?p=/triggers/greet-hook"))
		b.waitText(t, `/trigger\.fired/`)
	})

	t.Run("a trigger made, edited and deleted through its pages", func(t *testing.T) {
		b.nav(t, page("?p=/triggers/new"))
		b.click(t, "button", "Manual Trigger")
		b.click(t, "button", "Next")
		b.fill(t, "Trigger Name", "ui-made")
		b.fill(t, "Display Name", "Made in the UI")
		for range 3 { // info, config, flows, then the review
			b.click(t, "button", "Next")
		}
		b.click(t, "button", "Create Trigger")
		var got struct{ Name, DisplayName, Type string }
		waitFor(t, 20*time.Second, "the trigger stored", func() bool {
			return getJSON(nqd+"/api/_triggers/ui-made", &got) == nil
		})
		if got.Type != "manual" || got.DisplayName != "Made in the UI" {
			t.Errorf("stored trigger = %+v", got)
		}

		b.nav(t, page("?p=/triggers/ui-made/edit"))
		b.waitText(t, `/Edit Trigger/`)
		b.fill(t, "Display Name", "Renamed in the UI")
		b.click(t, "button", "Save Changes")
		waitFor(t, 20*time.Second, "the new display name stored", func() bool {
			return getJSON(nqd+"/api/_triggers/ui-made", &got) == nil && got.DisplayName == "Renamed in the UI"
		})

		b.click(t, "button", "Delete")
		b.click(t, `[role="dialog"] button`, "Delete Trigger")
		waitFor(t, 20*time.Second, "the trigger gone", func() bool {
			res, err := http.Get(nqd + "/api/_triggers/ui-made")
			if err != nil {
				return false
			}
			res.Body.Close()
			return res.StatusCode == http.StatusNotFound
		})
	})

	t.Run("queues and jobs", func(t *testing.T) {
		b.nav(t, page("?p=/queues"))
		b.waitText(t, `/\bhello\b/`)
		b.waitText(t, `/\bapprovals\b/`)
		b.nav(t, page("?p=/queues/hello/jobs"))
		b.waitText(t, `/greet|reply/`)
	})

	t.Run("scheduler", func(t *testing.T) {
		b.nav(t, page("?p=/settings/scheduler"))
		b.waitText(t, `/Scheduler/i`)
	})

	t.Run("runs paged", func(t *testing.T) {
		earlier := flowRuns(t, nqd, "hello")
		if len(earlier) != 2 {
			t.Fatalf("runs of hello = %+v, want two", earlier)
		}
		// Run ids begin with their start time, so the list tells them
		// apart by the end it shows.
		id := earlier[len(earlier)-1].ID
		oldest := id[len(id)-8:]
		for range 21 {
			if res := post(t, nqd+"/api/_flows/hello/start", `{}`); res.status != http.StatusOK {
				t.Fatalf("start: %d %s", res.status, res.body)
			}
		}
		b.nav(t, page("?p=/flows/hello"))
		b.waitText(t, `/\b23 runs\b/`)
		b.waitJS(t, fmt.Sprintf(`!document.body.innerText.includes(%q)`, oldest))
		b.click(t, "button", "2")
		b.waitText(t, fmt.Sprintf(`/%s/`, oldest))
		waitFor(t, 30*time.Second, "every hello run completed", func() bool {
			return !slices.ContainsFunc(flowRuns(t, nqd, "hello"), func(r run1) bool { return r.Status != "completed" })
		})
	})

	t.Run("clear history", func(t *testing.T) {
		b.nav(t, page("?p=/flows/hello"))
		b.waitText(t, `/\b23 runs\b/`)
		b.click(t, `button[aria-haspopup="menu"]`, "")
		b.click(t, `[role="menuitem"]`, "Clear History")
		b.click(t, `[role="dialog"] button`, "Clear History")
		waitFor(t, 20*time.Second, "hello's runs cleared", func() bool {
			return len(flowRuns(t, nqd, "hello")) == 0
		})
		b.waitText(t, `/No runs yet/`)
	})

	b.logConsole(t)
}

// needNuxtQueue skips the test without a local copy of the Nuxt Queue
// repository in NQD_NUXT_QUEUE_REPO, and fails it without one of tools; it
// returns that copy and the root of this repository.
func needNuxtQueue(t *testing.T, tools ...string) (repo, root string) {
	t.Helper()
	repo = os.Getenv("NQD_NUXT_QUEUE_REPO")
	if repo == "" {
		t.Skip("NQD_NUXT_QUEUE_REPO not set: give it a local copy of the Nuxt Queue repository to walk its " + uiTag + " UI")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the v0.5 UI test needs %s: %v", tool, err)
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return repo, root
}

// startWithStepFiles runs nqd with args and nqd-worker on the v0.5 step
// files until their flows are stored; it returns nqd's URL and how many
// flows it lists.
func startWithStepFiles(t *testing.T, root string, args ...string) (nqd string, flows int) {
	t.Helper()
	nqd = startServer(t, append([]string{"-data-dir", t.TempDir(), "-allow-open-webhooks", "true"}, args...))
	startStepFiles(t, root, nqd)
	var listed []struct{ ID string }
	waitFor(t, 30*time.Second, "the step files' flows stored", func() bool {
		if getJSON(nqd+"/api/_flows", &listed) != nil {
			return false
		}
		stored := 0
		for _, f := range listed {
			if f.ID == "hello" || f.ID == "approval" {
				stored++
			}
		}
		return stored == 2
	})
	return nqd, len(listed)
}

// walkRuns walks the pages of the step files' flows: their list, a run
// started and watched to its end, and an await continued by its webhook
// through front while every socket the page holds is broken.
func walkRuns(t *testing.T, b *browser, front *frontProxy, nqd string) {
	t.Helper()
	page := func(p string) string { return front.URL + "/_nvent" + p }

	t.Run("flows list with live stats", func(t *testing.T) {
		b.nav(t, page("?p=/flows"))
		b.waitText(t, `/\bhello\b/`)
		b.waitText(t, `/\bapproval\b/`)
	})

	t.Run("start a run and watch it to the end", func(t *testing.T) {
		b.nav(t, page("?p=/flows/hello"))
		b.waitText(t, `/No runs yet/`)
		b.click(t, "button", "Start")
		b.click(t, "button", "Start Flow")
		b.waitText(t, `/\b1 run\b/`)
		// The run is selected: its timeline fills live, log lines included.
		b.waitText(t, `/greeting/`)
		b.waitText(t, `/replying/`)
		b.waitText(t, `/completed/i`)
		runs := flowRuns(t, nqd, "hello")
		if len(runs) != 1 || runs[0].Status != "completed" {
			t.Fatalf("runs of hello = %+v, want one completed", runs)
		}
	})

	t.Run("webhook await continued by its URL, through a dropped socket", func(t *testing.T) {
		b.nav(t, page("?p=/flows/approval"))
		b.click(t, "button", "Start")
		b.click(t, "button", "Start Flow")
		b.waitText(t, `/awaiting/i`)
		runs := flowRuns(t, nqd, "approval")
		if len(runs) != 1 {
			t.Fatalf("runs of approval = %+v, want one", runs)
		}
		// Every socket the page holds breaks; the timeline's reconnects.
		if n := front.dropSockets(); n == 0 {
			t.Fatal("the page held no WebSocket through the front proxy")
		}
		res := post(t, front.URL+"/api/_webhook/await/approval/"+runs[0].ID+"/approve", `{"approvedBy":"ops"}`)
		if res.status != http.StatusOK || !strings.Contains(res.body, `"success":true`) {
			t.Fatalf("await webhook: %d %s", res.status, res.body)
		}
		b.waitText(t, `/Completed/i`)
		waitFor(t, 20*time.Second, "the approval run completed", func() bool {
			runs := flowRuns(t, nqd, "approval")
			return len(runs) == 1 && runs[0].Status == "completed"
		})
		if front.upgrades() < 2 {
			t.Errorf("%d socket upgrades, want the page to have reconnected after the drop", front.upgrades())
		}
	})
}

// startStepFiles builds the TypeScript SDK and runs nqd-worker on the v0.5
// step files in testdata, storing their flows.
func startStepFiles(t *testing.T, root, nqd string) {
	t.Helper()
	sdk := filepath.Join(root, "sdk", "typescript")
	if _, err := os.Stat(filepath.Join(sdk, "node_modules")); err != nil {
		runCmd(t, sdk, nil, "npm", "ci", "--no-audit", "--no-fund")
	}
	runCmd(t, sdk, nil, "npm", "run", "build")
	functions, err := filepath.Abs(filepath.Join("testdata", "nuxtui", "functions"))
	if err != nil {
		t.Fatal(err)
	}
	startCmd(t, sdk, nil, "node", "dist/cli.js", functions, "--url", nqd, "--store-flows", "--concurrency", "2", "--grace", "2000")
}

// buildUI checks the tagged UI out, adds the host app of testdata/nuxtui/ui-host
// and builds it, returning the folder that holds ui-host.
func buildUI(t *testing.T, repo, nqd string) string {
	t.Helper()
	dir := os.Getenv("NQD_NUXT_QUEUE_BUILD")
	if dir == "" {
		dir = t.TempDir()
	}
	if _, err := os.Stat(filepath.Join(dir, "ui-host", ".output", "server", "index.mjs")); err == nil {
		t.Logf("reusing the UI built in %s", dir)
		return dir
	}
	checkoutUI(t, repo, dir)
	env := []string{"NUXT_TELEMETRY_DISABLED=1", "CI=", "NQD_URL=" + nqd}
	runCmd(t, dir, env, "npx", "-y", pnpmPkg, "install", "--no-frozen-lockfile")
	runCmd(t, dir, env, "npx", "-y", pnpmPkg, "-C", "ui-host", "exec", "nuxi", "build")
	return dir
}

// checkoutUI extracts the tagged UI's workspace into dir and adds the host
// app of testdata/nuxtui/ui-host to it, as dir/ui-host.
func checkoutUI(t *testing.T, repo, dir string) {
	t.Helper()
	gitDir := repo
	if _, err := os.Stat(filepath.Join(repo, ".git")); err == nil {
		gitDir = filepath.Join(repo, ".git")
	}
	archive := exec.Command("git", "--git-dir", gitDir, "archive", uiTag)
	extract := exec.Command("tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	extract.Stdin = pipe
	var stderr bytes.Buffer
	archive.Stderr, extract.Stderr = &stderr, &stderr
	if err := extract.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s of %s: %v: %s", uiTag, repo, err, stderr.String())
	}
	if err := extract.Wait(); err != nil {
		t.Fatalf("extract: %v: %s", err, stderr.String())
	}
	if err := os.CopyFS(filepath.Join(dir, "ui-host"), os.DirFS(filepath.Join("testdata", "nuxtui", "ui-host"))); err != nil {
		t.Fatal(err)
	}
	ws, err := os.OpenFile(filepath.Join(dir, "pnpm-workspace.yaml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ws.WriteString("  - 'ui-host'\n"); err != nil {
		t.Fatal(err)
	}
	if err := ws.Close(); err != nil {
		t.Fatal(err)
	}
}

// startNuxt runs the built host app on port, with env, until the test ends.
func startNuxt(t *testing.T, dir, port string, env []string) {
	t.Helper()
	env = append([]string{"HOST=127.0.0.1", "PORT=" + port, "NUXT_TELEMETRY_DISABLED=1"}, env...)
	startCmd(t, dir, env, "node", "ui-host/.output/server/index.mjs")
	u := "http://127.0.0.1:" + port
	waitFor(t, 30*time.Second, "the Nuxt app up", func() bool {
		res, err := http.Get(u + "/_nvent")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
}

// frontProxy stands for the network between the browser and nqd: it
// forwards everything to nqd and keeps the upgraded connections so that a
// test can break them.
type frontProxy struct {
	*httptest.Server
	mu       sync.Mutex
	conns    []net.Conn
	upgraded int
}

func newFrontProxy(t *testing.T, nqd string) *frontProxy {
	t.Helper()
	u, err := url.Parse(nqd)
	if err != nil {
		t.Fatal(err)
	}
	to := httputil.NewSingleHostReverseProxy(u)
	p := &frontProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		to.ServeHTTP(&hijackWatch{ResponseWriter: w, p: p}, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// dropSockets breaks every upgraded connection and says how many there were.
func (p *frontProxy) dropSockets() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns)
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	return n
}

func (p *frontProxy) upgrades() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.upgraded
}

type hijackWatch struct {
	http.ResponseWriter
	p *frontProxy
}

func (h *hijackWatch) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err == nil {
		h.p.mu.Lock()
		h.p.conns = append(h.p.conns, c)
		h.p.upgraded++
		h.p.mu.Unlock()
	}
	return c, rw, err
}

func (h *hijackWatch) Unwrap() http.ResponseWriter { return h.ResponseWriter }

type run1 struct {
	ID     string
	Status string
}

func flowRuns(t *testing.T, nqd, flow string) []run1 {
	t.Helper()
	var page struct{ Items []run1 }
	if err := getJSON(nqd+"/api/_flows/"+flow+"/runs", &page); err != nil {
		t.Fatal(err)
	}
	return page.Items
}

func runStatus(t *testing.T, nqd, flow, id string) string {
	t.Helper()
	for _, r := range flowRuns(t, nqd, flow) {
		if r.ID == id {
			return r.Status
		}
	}
	return ""
}

func getJSON(u string, v any) error {
	res, err := http.Get(u)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, res.Status)
	}
	return json.NewDecoder(res.Body).Decode(v)
}

type answer struct {
	status int
	body   string
}

func post(t *testing.T, u, body string) answer {
	t.Helper()
	res, err := http.Post(u, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, string(raw)}
}

// runCmd runs a command to its end, failing the test with the end of its
// output when it fails.
func runCmd(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, tail(out))
	}
}

// startCmd starts a command that lives until the test ends; its output goes
// to the test's log when the test fails.
func startCmd(t *testing.T, dir string, env []string, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := testspawn.Start(cmd, nil); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s said:\n%s", name, tail(out.Bytes()))
		}
	})
	return cmd
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

func tail(b []byte) string {
	const n = 4000
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// browser is one headless Chromium tab and what its console said.
type browser struct {
	ctx  context.Context
	mu   sync.Mutex
	logs []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath("chromium"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.WindowSize(1400, 900),
	)
	b := &browser{}
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithListener(func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var parts []string
				for _, a := range ev.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				b.record("console.error: " + strings.Join(parts, " "))
			}
		case *runtime.EventExceptionThrown:
			b.record("exception: " + ev.ExceptionDetails.Text)
		}
	}))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1400, 900)); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	b.ctx = ctx
	return b
}

func (b *browser) record(msg string) {
	b.mu.Lock()
	b.logs = append(b.logs, msg)
	b.mu.Unlock()
}

// logConsole logs what the page said on its console: the UI is not ours,
// so its complaints are reported rather than failed on.
func (b *browser) logConsole(t *testing.T) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range b.logs {
		t.Logf("browser %s", l)
	}
}

func (b *browser) nav(t *testing.T, u string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(u)); err != nil {
		t.Fatalf("navigate to %s: %v", u, err)
	}
}

// waitText waits until the page's text matches the JavaScript regular
// expression re.
func (b *browser) waitText(t *testing.T, re string) {
	t.Helper()
	b.waitJS(t, re+`.test(document.body.innerText)`)
}

// click clicks the innermost element matching selector whose text is, or
// starts with, text.
func (b *browser) click(t *testing.T, selector, text string) {
	t.Helper()
	q, _ := json.Marshal(selector)
	w, _ := json.Marshal(text)
	b.waitJS(t, fmt.Sprintf(`(() => {
  const want = %s;
  const all = [...document.querySelectorAll(%s)].filter((e) => {
    const s = (e.innerText || '').trim();
    return (s === want || s.startsWith(want)) && e.offsetParent !== null && !e.disabled;
  });
  const inner = all.filter((e) => !all.some((o) => o !== e && e.contains(o)));
  if (inner.length === 0) return false;
  inner[0].click();
  return true;
})()`, w, q))
}

// fill types value into the input of the form field labelled label, as a
// person would: the page sees an input event.
func (b *browser) fill(t *testing.T, label, value string) {
	t.Helper()
	l, _ := json.Marshal(label)
	v, _ := json.Marshal(value)
	b.waitJS(t, fmt.Sprintf(`(() => {
  const label = [...document.querySelectorAll('label')].find((e) => e.offsetParent !== null && e.innerText.trim().startsWith(%s));
  if (!label) return false;
  let box = label.parentElement;
  while (box && !box.querySelector('input, textarea')) box = box.parentElement;
  const input = box && box.querySelector('input, textarea');
  if (!input) return false;
  const proto = input instanceof HTMLTextAreaElement ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
  Object.getOwnPropertyDescriptor(proto, 'value').set.call(input, %s);
  input.dispatchEvent(new Event('input', {bubbles: true}));
  return true;
})()`, l, v))
}

func (b *browser) waitJS(t *testing.T, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 45*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(40*time.Second))); err != nil {
		page, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`location.href + '\n' + document.body.innerText.slice(0, 2000)`))
		t.Fatalf("waiting for %s: %v\npage: %s", expr, err, page)
	}
}
