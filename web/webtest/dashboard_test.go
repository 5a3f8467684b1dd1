// Package webtest drives the dashboard in headless Chromium against a real
// nqd (the wiring, the embedded store, the example flows) and an in-process
// worker, and (with NQD_SCREENSHOTS=1, `make screenshots`) writes the
// screenshots that docs/dashboard.md shows.
package webtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/config"
	"github.com/nqd-dev/nqd/examples/demo"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/sdk/go/worker"
	"github.com/nqd-dev/nqd/web"
	"github.com/nqd-dev/nqd/wiring"
)

const chromium = "/usr/bin/chromium"

// shots is where the screenshots go: committed, and linked from the docs.
const shots = "../../docs/screenshots"

func TestDashboard(t *testing.T) {
	needChromium(t)
	srv := startServer(t, nil)
	startWorker(t, srv.URL, "")
	b := newBrowser(t)

	// Runs of the other example flows, so the flows page has numbers.
	for _, flow := range []string{"pipeline", "pipeline", "diamond", "ml-training"} {
		post(t, srv.URL+"/api/_flows/"+flow+"/start", `{}`)
	}

	t.Run("flows page", func(t *testing.T) {
		b.do(t, chromedp.Navigate(srv.URL+"/"))
		b.waitJS(t, `document.querySelectorAll('.flow-card').length === 4`)
		b.waitJS(t, `Number(document.querySelector('[data-flow="pipeline"] [data-status="completed"] .n')?.textContent) === 2`)
		b.shot(t, "flows")

		b.do(t, chromedp.Click(chromedp.CSS(`[data-flow="pipeline"] h2 a`)))
		b.waitJS(t, `document.querySelectorAll('.diagram .node[data-status="completed"]').length === 3`)
		b.waitJS(t, `document.querySelectorAll('table.runs tbody tr').length === 2`)
		b.shot(t, "flow")
		// The runs filter pages over one status.
		b.do(t, chromedp.Click(chromedp.CSS(`[data-filter="failed"]`)))
		b.waitJS(t, `document.querySelector('table.runs') === null && document.querySelector('.empty').textContent === 'No failed runs.'`)
		b.do(t, chromedp.NavigateBack())
		b.waitJS(t, `location.pathname === '/' && document.querySelectorAll('.flow-card').length === 4`)
	})

	var runID string
	t.Run("start a run and watch it complete live", func(t *testing.T) {
		b.do(t, chromedp.Click(chromedp.CSS(`[data-flow="example-flow"] h2 a`)))
		b.waitJS(t, `location.pathname === '/flows/example-flow' && document.querySelectorAll('.diagram .node').length === 3`)
		b.do(t, chromedp.Click(chromedp.ID("start-toggle")))
		b.do(t, chromedp.SendKeys(chromedp.ID("start-input"), `{"source": `))
		// Half-typed JSON is refused before anything is sent.
		b.waitJS(t, `document.querySelector('#start-form button[type=submit]').disabled && document.getElementById('start-msg').textContent.startsWith('Not valid JSON')`)
		b.do(t, chromedp.SendKeys(chromedp.ID("start-input"), `"browser"}`))
		b.waitJS(t, `!document.querySelector('#start-form button[type=submit]').disabled`)
		b.do(t, chromedp.Click(chromedp.CSS(`#start-form button[type=submit]`)))
		b.waitJS(t, `location.pathname.startsWith('/runs/')`)
		marker := b.evalString(t, `window.nqdMarker = 'same page'`)

		// fetch_data fails once and is retried after its backoff, then
		// await_approval waits for a person: the page follows on its stream,
		// with no reload, until the approval is fired from the page.
		b.waitJS(t, `document.querySelector('#awaits form.fire') !== null || document.querySelector('#run-status .badge')?.textContent === 'completed'`)
		if b.evalString(t, `String(document.querySelector('#awaits form.fire') !== null)`) == "true" {
			approve(t, b, srv)
		} else {
			t.Log("this nqd runs the example flow without awaits")
		}
		b.waitJS(t, `document.querySelector('#run-status .badge')?.textContent === 'completed'`)
		if got := b.evalString(t, `window.nqdMarker`); got != marker {
			t.Fatal("the page reloaded while the run ran")
		}
		b.waitJS(t, `document.querySelector('#timeline [data-kind="flow.completed"]') !== null`)
		b.waitJS(t, `document.querySelector('#timeline [data-kind="step.retry"], #timeline [data-kind="step.failed"]') !== null`)
		b.waitJS(t, `document.querySelectorAll('.diagram .node[data-status="completed"]').length === 3`)
		b.waitJS(t, `document.querySelector('#steps-done').textContent.includes('3/3')`)
		// The logs filter hides the demo's info lines at warn and up.
		b.waitJS(t, `document.querySelectorAll('.logs .log[data-level="info"]').length > 0`)
		b.do(t, chromedp.SetValue(chromedp.ID("log-level"), "warn"),
			chromedp.Evaluate[chromedp.Void](`document.getElementById('log-level').dispatchEvent(new Event('change'))`))
		b.waitJS(t, `document.querySelector('.logs') === null && document.querySelector('#log-level').closest('section').textContent.includes('No logs at this level.')`)
		b.do(t, chromedp.SetValue(chromedp.ID("log-level"), "debug"),
			chromedp.Evaluate[chromedp.Void](`document.getElementById('log-level').dispatchEvent(new Event('change'))`))
		runID = b.evalString(t, `location.pathname.split('/').pop()`)
		var input struct {
			State struct {
				Input map[string]string `json:"input"`
			} `json:"state"`
		}
		getJSON(t, srv.URL+"/api/_events/flow/"+runID+"/state", &input)
		if input.State.Input["source"] != "browser" {
			t.Errorf("the run's input is %v, want the JSON typed in the form", input.State.Input)
		}
		b.shot(t, "run")
	})

	t.Run("time travel", func(t *testing.T) {
		if runID == "" {
			t.Skip("no run")
		}
		b.waitJS(t, `document.getElementById('tt-state').dataset.status === 'completed'`)
		first := b.evalString(t, `document.querySelector('#timeline li').dataset.id`)
		b.do(t, chromedp.Focus(chromedp.ID("tt-slider")), chromedp.KeyEvent(kb.Home))
		b.waitJS(t, fmt.Sprintf(`document.getElementById('tt-state').dataset.at === %q`, first))
		b.waitJS(t, `document.getElementById('tt-state').dataset.status === 'running'`)
		b.waitJS(t, `document.getElementById('tt-label').textContent.startsWith('Event 1 of ')`)
		if state := b.evalString(t, `document.getElementById('tt-state').textContent`); strings.Contains(state, `"fetch_data"`) {
			t.Errorf("the state at the first event already has steps: %s", state)
		}
		// One step right shows what that one event changed.
		b.do(t, chromedp.KeyEvent(kb.ArrowRight))
		b.waitJS(t, `document.getElementById('tt-label').textContent.startsWith('Event 2 of ')`)
		b.waitJS(t, `document.querySelector('#tt-diff li') !== null`)
		b.do(t, chromedp.Evaluate[chromedp.Void](`document.getElementById('time-travel').scrollIntoView()`))
		b.shot(t, "time-travel")

		// An event of the timeline, chosen with the keyboard, shows the state there.
		b.do(t, chromedp.Focus(chromedp.ID("timeline")), chromedp.KeyEvent(kb.ArrowUp), chromedp.KeyEvent(kb.Enter))
		b.waitJS(t, `document.getElementById('tt-state').dataset.status === 'completed' && document.querySelector('#tt-diff').textContent.includes('status')`)
	})

	t.Run("a trigger route missing", func(t *testing.T) {
		if srv.hasTriggerRoute(t) {
			t.Skip("this nqd fires triggers: the run above fired one from the page")
		}
		fireWithoutTriggerRoute(t, b, srv)
	})

	t.Run("run not found", func(t *testing.T) {
		b.do(t, chromedp.Navigate(srv.URL+"/runs/no-such-run"))
		b.waitJS(t, `document.getElementById('not-found')?.textContent.includes('Run not found')`)
	})

	t.Run("triggers page", func(t *testing.T) {
		post(t, srv.URL+"/api/_events/trigger/approve-1", `{"events": [
			{"kind": "trigger.registered", "correlationId": "approval-1", "data": {"type": "webhook", "config": {}}}]}`)
		b.do(t, chromedp.Click(chromedp.CSS(`nav a[data-section="triggers"]`)))
		b.waitJS(t, `document.querySelector('tr[data-trigger="approve-1"]') !== null`)
		if srv.hasTriggerRoute(t) {
			// A run left waiting for its approval is listed, ready to fire.
			post(t, srv.URL+"/api/_flows/example-flow/start", `{}`)
			b.waitJS(t, `document.querySelector('table.waits tbody tr') !== null`)
			b.do(t, chromedp.Click(chromedp.CSS(`table.waits tbody tr button`)))
			b.waitJS(t, `document.getElementById('fire-id').value === document.querySelector('table.waits tbody tr button').dataset.trigger`)
			b.do(t, chromedp.Evaluate[chromedp.Void](`scrollTo(0, 0)`))
		}
		b.shot(t, "triggers")
	})

	t.Run("dark and phone", func(t *testing.T) {
		if runID == "" {
			t.Skip("no run")
		}
		b.do(t, darkMode, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)), chromedp.Navigate(srv.URL+"/runs/"+runID))
		b.waitJS(t, `document.querySelector('#run-status .badge')?.textContent === 'completed'`)
		b.waitJS(t, `document.querySelectorAll('.diagram.vertical .node[data-status="completed"]').length === 3`)
		b.waitJS(t, `getComputedStyle(document.documentElement).backgroundColor === 'rgb(15, 18, 23)'`)
		// The widest content, the state JSON, is drawn last: checked before
		// it, a page that scrolls sideways would pass by luck.
		b.waitJS(t, `document.getElementById('tt-state').dataset.status === 'completed'`)
		b.waitNoSideScroll(t)
		b.shot(t, "run-phone-dark")
		b.do(t, chromedp.EmulateViewport(1280, 860), chromedp.Navigate(srv.URL+"/flows/diamond"))
		b.waitJS(t, `document.querySelectorAll('.diagram .node[data-status="completed"]').length === 4`)
		b.shot(t, "flow-dark")
	})

	b.checkConsole(t)
}

// With API tokens configured the page asks for one, then works as before:
// its API calls carry it, and its streams a stream token in a cookie.
func TestDashboardSignIn(t *testing.T) {
	needChromium(t)
	const secret = "0123456789abcdef0123456789abcdef-ops"
	srv := startServer(t, map[string]string{"NQ_TOKENS": "ops:admin:" + secret})
	startWorker(t, srv.URL, secret)
	b := newBrowser(t)

	res, err := http.Get(srv.URL + "/api/_flows")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /api/_flows with no token: %d, want 401", res.StatusCode)
	}

	b.do(t, chromedp.Navigate(srv.URL+"/flows/pipeline"))
	b.waitJS(t, `document.getElementById('signin') !== null`)
	b.do(t, chromedp.SendKeys(chromedp.ID("token-input"), "not-the-token"), chromedp.Click(chromedp.CSS(`#signin button[type=submit]`)))
	b.waitJS(t, `document.getElementById('signin-msg')?.textContent.includes('refused')`)
	b.do(t, chromedp.SendKeys(chromedp.ID("token-input"), secret), chromedp.Click(chromedp.CSS(`#signin button[type=submit]`)))
	b.waitJS(t, `document.querySelectorAll('.diagram .node').length === 3`)

	b.do(t, chromedp.Click(chromedp.ID("start-toggle")), chromedp.Click(chromedp.CSS(`#start-form button[type=submit]`)))
	b.waitJS(t, `location.pathname.startsWith('/runs/')`)
	b.waitJS(t, `document.querySelector('#run-status .badge')?.textContent === 'completed'`)
	b.waitJS(t, `document.querySelector('#timeline [data-kind="flow.completed"]') !== null && document.querySelector('.live').textContent === 'live'`)
	b.checkConsole(t)
}

// A page whose server goes away says so, and keeps what it showed.
func TestDashboardServerUnreachable(t *testing.T) {
	needChromium(t)
	srv := startServer(t, nil)
	b := newBrowser(t)
	b.do(t, chromedp.Navigate(srv.URL+"/"))
	b.waitJS(t, `document.querySelectorAll('.flow-card').length === 4 && document.getElementById('server').textContent === ''`)
	srv.Close()
	b.waitJS(t, `document.getElementById('server').textContent === 'Server unreachable'`)
	b.waitJS(t, `document.querySelectorAll('.flow-card').length === 4`)
	b.checkConsole(t)
}

// approve fires the example flow's approval from the run page: first with a
// payload its schema refuses, which the page reports, then with a decision.
func approve(t *testing.T, b *browser, srv *server) {
	t.Helper()
	b.waitJS(t, `document.querySelector('#run-status .badge').textContent === 'awaiting'`)
	b.waitJS(t, `document.querySelector('.diagram .node[data-step="await_approval"]').dataset.status === 'waiting'`)
	b.waitJS(t, `document.querySelector('.trigger-url').textContent.includes('/api/_flows/triggers/')`)
	b.waitJS(t, `/times out in \d+ h/.test(document.querySelector('.countdown').textContent)`)
	b.shot(t, "awaits")

	id := b.evalString(t, `document.querySelector('#awaits form.fire').dataset.trigger`)
	b.do(t, chromedp.SendKeys(chromedp.CSS(`form.fire textarea`), `{"approved": "yes"}`),
		chromedp.Click(chromedp.CSS(`form.fire button[type=submit]`)))
	b.waitJS(t, `document.querySelector('.fire-msg').textContent.includes('schema')`)
	if status, _ := srv.trigger(id); status != http.StatusUnprocessableEntity {
		t.Errorf("a payload against the schema got %d, want 422", status)
	}

	b.do(t, chromedp.Evaluate[chromedp.Void](`document.querySelector('form.fire textarea').value = ''`),
		chromedp.SendKeys(chromedp.CSS(`form.fire textarea`), `{"approved": true, "by": "dashboard"}`),
		chromedp.Click(chromedp.CSS(`form.fire button[type=submit]`)))
	b.waitJS(t, `document.querySelector('.fire-msg')?.textContent.startsWith('Fired') || document.querySelector('#run-status .badge').textContent === 'completed'`)
	if status, body := srv.trigger(id); status/100 != 2 || body != `{"approved":true,"by":"dashboard"}` {
		t.Fatalf("the page's trigger request got %d with body %q", status, body)
	}
	b.waitJS(t, `document.querySelector('.logs').textContent.includes('by "dashboard"')`)
}

// fireWithoutTriggerRoute checks the await panel against a server without
// the trigger route: a run paused on a webhook, written through the events
// API as the engine writes it, and a fire that the page reports as not
// available.
func fireWithoutTriggerRoute(t *testing.T, b *browser, srv *server) {
	post(t, srv.URL+"/api/_events/flow/approval-1", `{"events": [
		{"kind": "flow.started", "flowName": "example-flow", "data": {"input": {"order": 7}}},
		{"kind": "log", "step": "await_approval", "data": {"level": "info", "msg": "waiting for a manager"}},
		{"kind": "step.await.trigger", "step": "await_approval", "attempt": 1,
		 "data": {"triggerId": "approve-1", "triggerType": "webhook", "timeout": 600000}}]}`)
	b.do(t, chromedp.Navigate(srv.URL+"/runs/approval-1"))
	b.waitJS(t, `document.querySelector('#awaits [data-await="await_approval"]') !== null`)
	b.waitJS(t, `document.querySelector('.trigger-url').textContent.endsWith('/api/_flows/triggers/approve-1')`)
	b.waitJS(t, `/times out in \d+ m/.test(document.querySelector('.countdown').textContent)`)
	b.waitJS(t, `document.querySelector('#run-status .badge').textContent === 'awaiting'`)
	b.shot(t, "awaits")

	b.do(t, chromedp.SendKeys(chromedp.CSS(`form.fire textarea`), `{"approved": true}`),
		chromedp.Click(chromedp.CSS(`form.fire button[type=submit]`)))
	b.waitJS(t, `document.querySelector('.fire-msg').textContent.includes('not available on this server')`)
	if status, body := srv.trigger("approve-1"); status != http.StatusNotFound || body != `{"approved":true}` {
		t.Errorf("the page's trigger request got %d with body %q, want a 404 with the payload", status, body)
	}
}

// needChromium skips the test without Chromium, unless CI demands it.
func needChromium(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath(chromium); err != nil {
		if os.Getenv("NQD_REQUIRE_BROWSER") == "1" {
			t.Fatalf("NQD_REQUIRE_BROWSER=1 but %s is missing", chromium)
		}
		t.Skipf("no %s: the dashboard's browser tests need Chromium", chromium)
	}
}

// hasTriggerRoute reports whether this nqd serves POST
// /api/_flows/triggers/:id; the router answers a missing route "No route".
func (s *server) hasTriggerRoute(t *testing.T) bool {
	t.Helper()
	res, err := http.Post(s.URL+"/api/_flows/triggers/probe", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return !(res.StatusCode == http.StatusNotFound && strings.Contains(string(raw), "No route"))
}

// server is nqd under test, with a record of trigger requests.
type server struct {
	URL      string
	Close    func() // stops serving; the test's cleanup calls it too
	mu       sync.Mutex
	triggers map[string][2]string // id: status, body
}

func (s *server) trigger(id string) (int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.triggers[id]
	if !ok {
		return 0, ""
	}
	var status int
	fmt.Sscan(r[0], &status)
	return status, r[1]
}

// startServer runs the real wiring with the example flows. The dashboard is
// mounted as the wiring mounts it; until the wiring passes the files, the
// test mounts them in front of its handler the same way.
func startServer(t *testing.T, env map[string]string) *server {
	t.Helper()
	args := []string{"-addr", "127.0.0.1:0", "-data-dir", t.TempDir(), "-flows-dir", "../../examples/flows",
		"-rate-per-addr", "0", "-rate-per-token", "0", "-log-level", "warn"}
	cfg, err := config.Load(args, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	app, err := wiring.New(context.Background(), cfg, testkit.Logger(t).Level(zerolog.ErrorLevel))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := app.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	h := app.Handler
	probe := httptest.NewRecorder()
	h.ServeHTTP(probe, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil))
	if !strings.HasPrefix(probe.Header().Get("Content-Type"), "text/html") {
		t.Log("the wiring does not mount the dashboard yet: mounting it in front")
		dash := handlers.New(handlers.Deps{Web: web.FS}).Routes()
		api := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if p := r.URL.Path; strings.HasPrefix(p, "/api/") || p == "/healthz" || p == "/readyz" || p == "/metrics" {
				api.ServeHTTP(w, r)
				return
			}
			dash.ServeHTTP(w, r)
		})
	}
	s := &server{triggers: map[string][2]string{}}
	inner := h
	h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := strings.CutPrefix(r.URL.Path, "/api/_flows/triggers/")
		if !ok || r.Method != http.MethodPost {
			inner.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &statusRecorder{ResponseWriter: w}
		inner.ServeHTTP(rec, r)
		s.mu.Lock()
		s.triggers[id] = [2]string{fmt.Sprint(rec.status), string(body)}
		s.mu.Unlock()
	})
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	s.URL, s.Close = ts.URL, ts.Close
	return s
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// startWorker runs the demo worker in-process, slow enough that a person
// (and a screenshot) sees steps run.
func startWorker(t *testing.T, base, token string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := worker.Config{BaseURL: base, Queues: []string{"default"}, Concurrency: 4,
		Client: &http.Client{Transport: bearer(token)},
		Logger: slog.New(slog.NewTextHandler(zerolog.NewTestWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))}
	go func() {
		done <- worker.Run(ctx, cfg, demo.Handlers(demo.Options{Work: 150 * time.Millisecond, Epochs: 3}))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
}

// bearer sends an API token with every request, when there is one.
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+string(b))
	}
	return http.DefaultTransport.RoundTrip(r)
}

// browser is one headless Chromium tab and what its console said.
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

func newBrowser(t *testing.T, flags ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.WindowSize(1280, 860),
	}, flags...)...,
	)
	b := &browser{}
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithListener(func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				b.record(fmt.Sprintf("console.%s: %s", ev.Type, args(ev.Args)))
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			b.record(fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, msg))
		}
	}))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 860), lightMode); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	b.ctx = ctx
	return b
}

func args(objs []*runtime.RemoteObject) string {
	var parts []string
	for _, o := range objs {
		if len(o.Value) > 0 {
			parts = append(parts, string(o.Value))
		} else {
			parts = append(parts, o.Description)
		}
	}
	return strings.Join(parts, " ")
}

func (b *browser) record(msg string) {
	b.mu.Lock()
	b.errors = append(b.errors, msg)
	b.mu.Unlock()
}

func (b *browser) checkConsole(t *testing.T) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errors {
		t.Errorf("browser console: %s", e)
	}
}

// do runs actions with a deadline, so that a missing element fails the
// test instead of hanging it.
func (b *browser) do(t *testing.T, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// waitJS waits until the expression is truthy in the page.
func (b *browser) waitJS(t *testing.T, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(25*time.Second))); err != nil {
		page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + '\n' + document.querySelector('main').innerText.slice(0, 1500)`))
		t.Fatalf("waiting for %s: %v\npage: %s", expr, err, page)
	}
}

// overflowing names the innermost elements that reach past the viewport's
// right edge, with their right edge and text, to say what makes a page
// scroll sideways.
const overflowing = `(() => {
  const past = (e) => e.getBoundingClientRect().right > innerWidth + 0.5;
  // Content that scrolls inside a box that fits does not widen the page.
  const clipped = (e) => {
    for (let a = e.parentElement; a; a = a.parentElement) {
      if (getComputedStyle(a).overflowX !== 'visible' && !past(a)) return true;
    }
    return false;
  };
  return [...document.querySelectorAll('body *')]
    .filter((e) => past(e) && !clipped(e) && ![...e.children].some(past))
    .slice(0, 8)
    .map((e) => e.tagName.toLowerCase() + (e.getAttribute('class') ? '.' + e.getAttribute('class').trim().split(/\s+/).join('.') : '') +
      ' right ' + Math.round(e.getBoundingClientRect().right) + 'px: ' + (e.textContent || '').trim().slice(0, 100))
    .join('\n');
})()`

// waitNoSideScroll waits until the page fits the viewport's width and, when
// it does not, fails naming what sticks out.
func (b *browser) waitNoSideScroll(t *testing.T) {
	t.Helper()
	const fits = `document.documentElement.scrollWidth <= innerWidth`
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](fits, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(25*time.Second))); err != nil {
		width, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.scrollWidth + 'px wide in a ' + innerWidth + 'px viewport'`))
		culprits, _ := chromedp.Run(ctx, chromedp.Evaluate[string](overflowing))
		t.Fatalf("the page scrolls sideways, %s: %v\nsticking out:\n%s", width, err, culprits)
	}
}

func (b *browser) evalString(t *testing.T, expr string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// shot takes a screenshot of the viewport and, when asked for, writes it to
// docs/screenshots/<name>.png.
func (b *browser) shot(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if len(png) == 0 {
		t.Fatalf("screenshot %s is empty", name)
	}
	// Every run draws other run ids and times, so the committed pictures
	// are rewritten only when asked for (make screenshots).
	if os.Getenv("NQD_SCREENSHOTS") != "1" {
		return
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func media(scheme string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
		})
		return chromedp.Void{}, err
	}
}

var (
	lightMode = media("light")
	darkMode  = media("dark")
)

func post(t *testing.T, url, body string) {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %d %s", url, res.StatusCode, raw)
	}
}

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
