package wiring

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/config"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/internal/wait"
)

// testConfig is the default configuration on a free loopback port.
func testConfig(t *testing.T) config.Config {
	t.Helper()
	cfg, err := config.Load([]string{"-addr", "127.0.0.1:0", "-data-dir", t.TempDir()}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// mustStartApp runs the real wiring and serves it until the test ends (or
// the returned stop function is called).
func mustStartApp(t *testing.T, cfg config.Config) (base string, stop func()) {
	t.Helper()
	app, err := New(context.Background(), cfg, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Serve() }()
	var once bool
	stop = func() {
		if once {
			return
		}
		once = true
		if err := app.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		if err := app.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}
	t.Cleanup(stop)
	return "http://" + app.Addr(), stop
}

func do(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: body is not JSON: %v", method, url, err)
	}
	return res.StatusCode, out
}

// TestEventsSurviveRestart is the new user's first experience: events
// appended to the embedded store are still there after a restart.
func TestEventsSurviveRestart(t *testing.T) {
	cfg := testConfig(t)
	base, stop := mustStartApp(t, cfg)
	if code, _ := do(t, "POST", base+"/api/_events/flow/run-1", `{"kind":"flow.started","flowName":"demo"}`); code != http.StatusCreated {
		t.Fatalf("append: got %d, want 201", code)
	}
	if code, _ := do(t, "POST", base+"/api/_events/flow/run-1", `{"events":[{"kind":"step.started","step":"a"},{"kind":"step.completed","step":"a"}]}`); code != http.StatusCreated {
		t.Fatalf("batch append: got %d, want 201", code)
	}
	stop()

	base, _ = mustStartApp(t, cfg)
	code, ctx := do(t, "GET", base+"/api/_events/flow/run-1", "")
	if code != http.StatusOK || ctx["eventCount"] != float64(3) {
		t.Fatalf("after restart: got %d %v, want 200 with 3 events", code, ctx)
	}
	_, list := do(t, "GET", base+"/api/_events/flow/list?name=demo", "")
	if items, _ := list["items"].([]any); len(items) != 1 {
		t.Fatalf("runs of demo after restart: got %v, want run-1", list)
	}
}

func TestRedisBackend(t *testing.T) {
	cfg := testConfig(t)
	cfg.RedisURL = "redis://" + redistest.Addr(t) + "/0"
	cfg.Prefix = redistest.Prefix(t)
	base, _ := mustStartApp(t, cfg)
	if code, _ := do(t, "POST", base+"/api/_events/flow/run-1", `{"kind":"flow.started","flowName":"demo"}`); code != http.StatusCreated {
		t.Fatalf("append: got %d, want 201", code)
	}
	client := redistest.Client(t)
	n, err := client.XLen(context.Background(), cfg.Prefix+":flow:run-1").Result()
	if err != nil || n != 1 {
		t.Fatalf("XLEN of the run's stream = %d, %v; want 1", n, err)
	}
	if code, _ := do(t, "GET", base+"/readyz", ""); code != http.StatusOK {
		t.Fatalf("readyz on Redis: got %d", code)
	}
}

// TestRedisShards: nqd serves its API with the keys split over shards, and
// refuses to start on that data with another number of shards, naming the
// setting.
func TestRedisShards(t *testing.T) {
	cfg := testConfig(t)
	cfg.RedisURL = "redis://" + redistest.Addr(t) + "/0"
	cfg.Prefix = redistest.Prefix(t)
	cfg.RedisShards = 4
	base, stop := mustStartApp(t, cfg)
	for _, run := range []string{"run-1", "run-2", "run-3"} {
		if code, _ := do(t, "POST", base+"/api/_events/flow/"+run, `{"kind":"flow.started","flowName":"demo"}`); code != http.StatusCreated {
			t.Fatalf("append to %s: got %d, want 201", run, code)
		}
	}
	_, list := do(t, "GET", base+"/api/_events/flow/list?name=demo", "")
	if items, _ := list["items"].([]any); len(items) != 3 {
		t.Fatalf("runs of demo: got %v, want three", list)
	}
	stop()
	cfg.RedisShards = 2
	_, err := New(context.Background(), cfg, zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "NQ_REDIS_SHARDS=2") {
		t.Fatalf("start with 2 shards on data of 4: %v, want a refusal naming NQ_REDIS_SHARDS", err)
	}
}

func TestUnreachableRedisFailsAtStart(t *testing.T) {
	cfg := testConfig(t)
	cfg.RedisURL = "redis://:secret@127.0.0.1:1/0"
	_, err := New(context.Background(), cfg, zerolog.Nop())
	if err == nil {
		t.Fatal("New succeeded without a Redis")
	}
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("the error leaks the password: %v", err)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:pw@h:6379/0":     "redis://***@h:6379/0",
		"redis://user:pw@h:6379/0": "redis://***@h:6379/0",
		"redis://h:6379/0":         "redis://h:6379/0",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestShutdownEndsStreams: a graceful shutdown must not hang on open event
// streams, and their clients see the stream end (and would reconnect).
func TestShutdownEndsStreams(t *testing.T) {
	cfg := testConfig(t)
	cfg.ShutdownTimeout = 5 * time.Second
	base, stop := mustStartApp(t, cfg)
	do(t, "POST", base+"/api/_events/flow/run-1", `{"kind":"flow.started","flowName":"demo"}`)

	res, err := http.Get(base + "/api/_events/flow/run-1/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("Content-Type = %q", ct)
	}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "data: ") {
	}
	if !strings.Contains(sc.Text(), `"flow.started"`) {
		t.Fatalf("first data line = %q, want the backfilled flow.started", sc.Text())
	}

	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	for sc.Scan() {
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown did not finish with a stream open")
	}
}

// TestStateThroughWiring: the assembled server answers with reduced state and
// time travel.
func TestStateThroughWiring(t *testing.T) {
	base, _ := mustStartApp(t, testConfig(t))
	_, first := do(t, "POST", base+"/api/_events/flow/run-1", `{"kind":"flow.started","flowName":"demo"}`)
	do(t, "POST", base+"/api/_events/flow/run-1", `{"kind":"flow.completed"}`)

	_, now := do(t, "GET", base+"/api/_events/flow/run-1", "")
	if st, _ := now["state"].(map[string]any); st["status"] != "completed" {
		t.Fatalf("state now = %v, want status completed", now["state"])
	}
	_, then := do(t, "GET", base+"/api/_events/flow/run-1/state?at="+first["id"].(string), "")
	if st, _ := then["state"].(map[string]any); st["status"] != "running" {
		t.Fatalf("state at the first event = %v, want status running", then["state"])
	}
}

// TestFlowsThroughWiring: definitions in NQ_FLOWS_DIR are served, and a run
// started over HTTP enters the run index with its entry job queued.
func TestFlowsThroughWiring(t *testing.T) {
	cfg := testConfig(t)
	cfg.FlowsDir = "../flows/testdata"
	base, _ := mustStartApp(t, cfg)

	res, err := http.Get(base + "/api/_flows")
	if err != nil {
		t.Fatal(err)
	}
	var defs []map[string]any
	if err := json.NewDecoder(res.Body).Decode(&defs); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	names := map[any]bool{}
	for _, d := range defs {
		names[d["id"]] = true
	}
	if !names["example-flow"] || !names["diamond"] {
		t.Fatalf("GET /api/_flows lists %v, want example-flow and diamond", names)
	}

	code, started := do(t, "POST", base+"/api/_flows/diamond/start", `{"order":7}`)
	if code != http.StatusOK || started["flowId"] == nil {
		t.Fatalf("start: %d %v", code, started)
	}
	_, runs := do(t, "GET", base+"/api/_events/flow/list?name=diamond&status=running", "")
	if items, _ := runs["items"].([]any); len(items) != 1 || items[0].(map[string]any)["id"] != started["flowId"] {
		t.Fatalf("running runs of diamond = %v, want the started run", runs)
	}
}

// TestTwoInstancesShareLiveEvents: two servers on one Redis, as two nqd
// processes would be; an event appended through one reaches a stream client
// of the other.
func TestTwoInstancesShareLiveEvents(t *testing.T) {
	addr, prefix := redistest.Addr(t), redistest.Prefix(t)
	instance := func() string {
		cfg := testConfig(t)
		cfg.RedisURL, cfg.Prefix = "redis://"+addr+"/0", prefix
		base, _ := mustStartApp(t, cfg)
		return base
	}
	one, two := instance(), instance()
	_, first := do(t, "POST", one+"/api/_events/flow/shared", `{"kind":"flow.started","flowName":"demo"}`)

	res, err := http.Get(two + "/api/_events/flow/shared/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// Once the backfilled event has arrived the backfill read is over, so
	// the next event can only come through the live path.
	waitLine(t, lines, func(l string) bool { return l == "id: "+first["id"].(string) })

	_, rec := do(t, "POST", one+"/api/_events/flow/shared", `{"kind":"step.started","step":"a"}`)
	waitLine(t, lines, func(l string) bool { return l == "id: "+rec["id"].(string) })
}

func waitLine(t *testing.T, lines <-chan string, match func(string) bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("stream ended")
			}
			if match(l) {
				return
			}
		case <-deadline:
			t.Fatal("no matching line within 10s")
		}
	}
}

func TestKVThroughWiring(t *testing.T) {
	base, _ := mustStartApp(t, testConfig(t))
	if code, body := do(t, "PUT", base+"/api/_kv/job-1", `{"fields":{"state":"pending"}}`); code != http.StatusOK && code != http.StatusCreated {
		t.Fatalf("put: %d %v", code, body)
	}
	code, _ := do(t, "POST", base+"/api/_kv/job-1/cas", `{"field":"state","expected":"pending","set":{"state":"claimed"}}`)
	if code != http.StatusOK {
		t.Fatalf("first claim: got %d, want 200", code)
	}
	if code, _ := do(t, "POST", base+"/api/_kv/job-1/cas", `{"field":"state","expected":"pending","set":{"state":"claimed"}}`); code != http.StatusConflict {
		t.Fatalf("second claim: got %d, want 409", code)
	}
}

// TestShutdownEndsLongPolls: a worker's claim waiting for jobs does not hold
// a shutdown up: the claim is answered 503 at once and, with nothing else in
// flight, the shutdown takes a small part of its timeout.
func TestShutdownEndsLongPolls(t *testing.T) {
	cfg := testConfig(t)
	cfg.ShutdownTimeout = 10 * time.Second
	app, err := New(context.Background(), cfg, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close() })
	var active atomic.Int32
	app.srv.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateActive {
			active.Add(1)
		}
	}
	served := make(chan error, 1)
	go func() { served <- app.Serve() }()

	claimed := make(chan int, 1)
	go func() {
		res, err := http.Post("http://"+app.Addr()+"/api/_workers/claim", "application/json", strings.NewReader(`{"queues":["q1"],"waitMs":30000}`))
		if err != nil {
			claimed <- 0
			return
		}
		_ = res.Body.Close()
		claimed <- res.StatusCode
	}()
	wait.For(t, 10*time.Second, time.Millisecond, "the claim is in flight", func() bool { return active.Load() == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	start := time.Now()
	if err := app.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	took := time.Since(start)
	if code := <-claimed; code != http.StatusServiceUnavailable {
		t.Errorf("the waiting claim got %d, want 503", code)
	}
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
	if took > cfg.ShutdownTimeout/5 {
		t.Errorf("shutdown took %v of its %v timeout with only a long poll open", took, cfg.ShutdownTimeout)
	}
	t.Logf("shutdown with a claim waiting took %v", took)
}

// TestIdleConnectionsClose: a keep-alive connection that sends no next
// request is closed after NQ_IDLE_TIMEOUT, so idle clients cannot hold
// connections forever.
func TestIdleConnectionsClose(t *testing.T) {
	cfg := testConfig(t)
	cfg.IdleTimeout = 200 * time.Millisecond
	base, _ := mustStartApp(t, cfg)
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, res.Body); err != nil || res.StatusCode != http.StatusOK || res.Close {
		t.Fatalf("healthz: %d, close %v, %v", res.StatusCode, res.Close, err)
	}
	// The server closes the connection: the next read ends, well before
	// the deadline, with end of input rather than a timeout.
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("idle connection: read %d bytes, %v; want the server to close it", n, err)
	}
}

// TestShutdownClosesSockets: through the assembled server (its metrics and
// access log around the router), a WebSocket opens, and shutting down tells
// it the server restarts and closes it with 1001.
func TestShutdownClosesSockets(t *testing.T) {
	cfg := testConfig(t)
	cfg.ShutdownTimeout = 5 * time.Second
	base, stop := mustStartApp(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/api/_flows/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if _, data, err := c.Read(ctx); err != nil || !strings.Contains(string(data), `"type":"connected"`) {
		t.Fatalf("first message %s, %v", data, err)
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	if _, data, err := c.Read(ctx); err != nil || !strings.Contains(string(data), `"type":"server-restart"`) {
		t.Fatalf("on shutdown: %s, %v", data, err)
	}
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("then %v, want close 1001", err)
	}
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("shutdown did not finish with a socket open")
	}
}
