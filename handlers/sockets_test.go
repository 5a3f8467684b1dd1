package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/pgtest"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/registry"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
	"github.com/nqd-dev/nqd/store/pgstore"
	"github.com/nqd-dev/nqd/store/redisstore"
	"github.com/nqd-dev/nqd/stream"
	"github.com/nqd-dev/nqd/triggers"
)

// socketBackends are the stores every socket test runs on.
var socketBackends = []string{"bolt", "redis", "postgres"}

// socketStore is what a socket test needs of a backend.
type socketStore interface {
	engine.Store
	handlers.Store
	stream.Source
}

// openSocketStores opens n stores of backend on the same data, as n nqd
// instances would be (the embedded store, which one process owns, gives
// one).
func openSocketStores(t *testing.T, backend string, n int) []socketStore {
	t.Helper()
	log := testkit.Logger(t)
	var out []socketStore
	switch backend {
	case "bolt":
		out = append(out, bolttest.Open(t, boltstore.Options{Logger: log}))
	case "redis":
		client, prefix := redistest.Client(t), redistest.Prefix(t)
		for range n {
			st, err := redisstore.New(client, redisstore.Options{Prefix: prefix, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			out = append(out, st)
		}
	case "postgres":
		url := pgtest.URL(t)
		for range n {
			st, err := pgstore.Open(t.Context(), url, pgstore.Options{Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			out = append(out, st)
		}
	}
	return out
}

// socketNode is one instance serving the sockets through the real router.
type socketNode struct {
	url    string // http://host:port
	st     socketStore
	engine *engine.Engine
	api    *handlers.API
}

// startSocketNode serves the API on st with a flow "sf" (one step on queue
// "sq"); opts may change the deps.
func startSocketNode(t *testing.T, st socketStore, opts ...func(*handlers.Deps)) *socketNode {
	t.Helper()
	log := testkit.Logger(t)
	e := engine.New(st, engine.Options{Logger: log})
	d := &flows.Definition{Name: "sf", Entry: "only", Steps: map[string]flows.Step{"only": {Queue: "sq"}}}
	if err := e.PutDefinition(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	sh := stream.NewHandler(stream.Options{Store: st, Log: log, TrustLive: st.Features().LiveReliable, CheckInterval: 50 * time.Millisecond})
	t.Cleanup(sh.Close)
	deps := handlers.Deps{Store: st, Engine: e, KV: (*boltstore.Store)(nil), Feeds: sh, Log: log, WatchInterval: 20 * time.Millisecond}
	for _, opt := range opts {
		opt(&deps)
	}
	api := handlers.New(deps)
	srv := httptest.NewServer(api.Routes())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = api.DrainSockets(ctx)
		srv.Close()
	})
	return &socketNode{url: srv.URL, st: st, engine: e, api: api}
}

// wsClient is a socket client that reads every message into a channel.
type wsClient struct {
	t    *testing.T
	c    *websocket.Conn
	msgs chan map[string]any
	end  chan error // the read error that ended the socket
}

func dialSocket(t *testing.T, base, path string, hdr http.Header) *wsClient {
	t.Helper()
	c, err := dialSocketErr(t, base, path, hdr)
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	return c
}

func dialSocketErr(t *testing.T, base, path string, hdr http.Header) (*wsClient, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, res, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+path, &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		if res != nil {
			return nil, fmt.Errorf("%w (status %d)", err, res.StatusCode)
		}
		return nil, err
	}
	c.SetReadLimit(1 << 24)
	w := &wsClient{t: t, c: c, msgs: make(chan map[string]any, 4096), end: make(chan error, 1)}
	go func() {
		for {
			_, data, err := c.Read(context.Background())
			if err != nil {
				w.end <- err
				close(w.msgs)
				return
			}
			var m map[string]any
			if err := json.Unmarshal(data, &m); err != nil {
				w.end <- fmt.Errorf("message %q is not a JSON object: %w", data, err)
				close(w.msgs)
				return
			}
			w.msgs <- m
		}
	}()
	t.Cleanup(func() { _ = c.CloseNow() })
	return w, nil
}

func (w *wsClient) send(msg string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		w.t.Fatalf("send %s: %v", msg, err)
	}
}

// next is the next message, within 10s.
func (w *wsClient) next() map[string]any {
	w.t.Helper()
	select {
	case m, ok := <-w.msgs:
		if !ok {
			w.t.Fatalf("socket ended: %v", <-w.end)
		}
		return m
	case <-time.After(10 * time.Second):
		w.t.Fatal("no message within 10s")
	}
	return nil
}

// expect reads the next message and checks its type.
func (w *wsClient) expect(typ string) map[string]any {
	w.t.Helper()
	m := w.next()
	if m["type"] != typ {
		w.t.Fatalf("got %v, want a %s message", m, typ)
	}
	return m
}

// closed waits for the socket to end and returns how.
func (w *wsClient) closed() error {
	w.t.Helper()
	for {
		select {
		case _, ok := <-w.msgs:
			if !ok {
				return <-w.end
			}
		case <-time.After(10 * time.Second):
			w.t.Fatal("socket still open after 10s")
		}
	}
}

func appendTo(t *testing.T, st socketStore, c store.Context, evs ...event.Event) []event.Event {
	t.Helper()
	res, err := st.Append(t.Context(), c, evs, store.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return res.Events
}

func stepEvent(run string, i int) event.Event {
	return event.Event{Kind: "step.started", RunID: run, Subject: run, FlowName: "sf", Step: "only", Attempt: 1,
		Data: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
}

// recordsOf are the records of a history or event message of the flows
// socket, checked against the v0.5 envelope.
func recordsOf(t *testing.T, m map[string]any) []map[string]any {
	t.Helper()
	var envs []any
	switch m["type"] {
	case "history":
		envs, _ = m["events"].([]any)
	case "event":
		envs = []any{m["event"]}
	default:
		t.Fatalf("message %v holds no events", m)
	}
	var out []map[string]any
	for _, e := range envs {
		env, _ := e.(map[string]any)
		rec, _ := env["record"].(map[string]any)
		if env["v"] != float64(1) || rec == nil || env["eventType"] != rec["type"] {
			t.Fatalf("envelope %v, want {v:1, eventType, record}", env)
		}
		if _, ok := rec["ts"].(float64); !ok {
			t.Fatalf("record %v: ts is not a number", rec)
		}
		out = append(out, rec)
	}
	return out
}

// TestFlowSocketMessages walks every message of /api/_flows/ws on each
// store: the error answers, ping, a run's history in the v0.5 shape then its
// live events, unsubscribe.
func TestFlowSocketMessages(t *testing.T) {
	for _, backend := range socketBackends {
		t.Run(backend, func(t *testing.T) {
			n := startSocketNode(t, openSocketStores(t, backend, 1)[0])
			run := store.Context{Type: "flow", ID: "r1"}
			stored := appendTo(t, n.st, run, stepEvent("r1", 0), stepEvent("r1", 1), stepEvent("r1", 2))

			ws := dialSocket(t, n.url, "/api/_flows/ws", nil)
			if m := ws.expect("connected"); m["timestamp"] == nil {
				t.Errorf("connected %v has no timestamp", m)
			}
			ws.send(`{not json`)
			if m := ws.expect("error"); m["message"] != "Invalid JSON" {
				t.Errorf("bad JSON answered %v", m)
			}
			ws.send(`{"type":"nope"}`)
			if m := ws.expect("error"); m["message"] != "Unknown message type: nope" {
				t.Errorf("unknown type answered %v", m)
			}
			ws.send(`{"type":"subscribe","flowName":"sf"}`)
			if m := ws.expect("error"); m["message"] != "Missing flowName or runId" {
				t.Errorf("subscribe without runId answered %v", m)
			}
			ws.send(`{"type":"subscribe","flowName":"sf","runId":"../x"}`)
			ws.expect("error")
			ws.send(`{"type":"ping"}`)
			ws.expect("pong")

			ws.send(`{"type":"subscribe","flowName":"sf","runId":"r1"}`)
			h := ws.expect("history")
			recs := recordsOf(t, h)
			if len(recs) != 3 || h["flowName"] != "sf" || h["runId"] != "r1" {
				t.Fatalf("history %v, want the run's 3 events", h)
			}
			want := map[string]any{"id": stored[0].ID.String(), "ts": float64(stored[0].ID.MS), "type": "step.started",
				"runId": "r1", "flowName": "sf", "stepName": "only", "stepId": "r1__only__attempt-1", "attempt": float64(1),
				"data": map[string]any{"i": float64(0)}}
			if got, _ := json.Marshal(recs[0]); string(got) != string(must(json.Marshal(want))) {
				t.Errorf("record\n got %s\nwant %s", got, must(json.Marshal(want)))
			}
			ws.expect("subscribed")

			live := appendTo(t, n.st, run, stepEvent("r1", 3), stepEvent("r1", 4))
			for _, ev := range live {
				m := ws.expect("event")
				if r := recordsOf(t, m); r[0]["id"] != ev.ID.String() || m["runId"] != "r1" {
					t.Fatalf("live %v, want %s", m, ev.ID)
				}
			}
			appendTo(t, n.st, run, event.Event{Kind: "flow.cancelled", RunID: "r1", Subject: "r1", FlowName: "sf"})
			if r := recordsOf(t, ws.expect("event")); r[0]["type"] != "flow.canceled" {
				t.Errorf("a cancelled run's record %v, want type flow.canceled, the v0.5 UI's spelling", r[0])
			}
			ws.send(`{"type":"unsubscribe","flowName":"sf","runId":"r1"}`)
			ws.expect("unsubscribed")
			appendTo(t, n.st, run, stepEvent("r1", 5))
			ws.send(`{"type":"ping"}`)
			ws.expect("pong") // and no event before it
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// collector reads a flow socket's run messages into ids.
type collector struct {
	ids []string
}

func (c *collector) add(t *testing.T, m map[string]any) {
	for _, r := range recordsOf(t, m) {
		c.ids = append(c.ids, r["id"].(string))
	}
}

// TestFlowSocketNoGapNoDuplicate: while a writer appends to a run through
// one instance, clients of another subscribe, read the history then live,
// drop the socket midway and subscribe again on a new one; every socket
// receives the run from its start to the writer's last event, in order,
// each event once: none both in the history and live, none missing.
func TestFlowSocketNoGapNoDuplicate(t *testing.T) {
	for _, backend := range socketBackends {
		t.Run(backend, func(t *testing.T) {
			sts := openSocketStores(t, backend, 2)
			writer := startSocketNode(t, sts[0])
			reader := writer
			if len(sts) > 1 {
				reader = startSocketNode(t, sts[1])
			}
			run := store.Context{Type: "flow", ID: "busy"}
			const total = 300
			dial := func() *wsClient {
				ws := dialSocket(t, reader.url, "/api/_flows/ws", nil)
				ws.expect("connected")
				ws.send(`{"type":"subscribe","flowName":"sf","runId":"busy"}`)
				return ws
			}
			// The writer goes on while each socket reads its history: the
			// first subscribes before it starts, the second halfway.
			first := dial()
			halfway, second := make(chan struct{}), make(chan *wsClient, 1)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range total {
					if i == total/2 {
						<-halfway
					}
					if _, err := writer.st.Append(context.Background(), run, []event.Event{stepEvent("busy", i)}, store.AppendOptions{}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
			read := func(ws *wsClient, stopAfter int) []string {
				var c collector
				for len(c.ids) < stopAfter {
					m := ws.next()
					switch m["type"] {
					case "history", "event":
						c.add(t, m)
					case "subscribed":
					default:
						t.Fatalf("unexpected %v", m)
					}
				}
				_ = ws.c.CloseNow()
				return c.ids
			}
			got1 := read(first, total/3) // dropped mid-run
			second <- dial()
			close(halfway)
			got2 := read(<-second, total) // a new socket, to the end
			wg.Wait()
			evs, err := writer.st.Range(t.Context(), run, store.RangeQuery{})
			if err != nil {
				t.Fatal(err)
			}
			for name, got := range map[string][]string{"first socket": got1, "second socket": got2} {
				for i, id := range got {
					if i >= len(evs) || evs[i].ID.String() != id {
						t.Fatalf("%s: event %d is %s, want %v (received %d)", name, i, id, evs[min(i, len(evs)-1)].ID, len(got))
					}
				}
			}
			if len(got2) != total {
				t.Fatalf("second socket received %d events, want %d", len(got2), total)
			}
		})
	}
}

// TestFlowSocketStats: subscribe.stats answers each flow's stats, then an
// update when a run starts, on another instance than the one it started
// on; a second subscribe.stats is an error; unsubscribe.stats answers.
func TestFlowSocketStats(t *testing.T) {
	for _, backend := range socketBackends {
		t.Run(backend, func(t *testing.T) {
			sts := openSocketStores(t, backend, 2)
			one := startSocketNode(t, sts[0])
			two := one
			if len(sts) > 1 {
				two = startSocketNode(t, sts[1])
			}
			if _, err := one.engine.Start(t.Context(), "sf", json.RawMessage(`{}`), ""); err != nil {
				t.Fatal(err)
			}
			ws := dialSocket(t, two.url, "/api/_flows/ws", nil)
			ws.expect("connected")
			ws.send(`{"type":"subscribe.stats"}`)
			m := ws.expect("flow.stats.initial")
			data, _ := m["data"].(map[string]any)
			meta, _ := data["metadata"].(map[string]any)
			stats, _ := meta["stats"].(map[string]any)
			if data["id"] != "sf" || stats["total"] != float64(1) || stats["running"] != float64(1) || meta["lastRunAt"] == nil {
				t.Fatalf("initial stats %v, want sf with one running run", m)
			}
			ws.expect("stats.subscribed")
			ws.send(`{"type":"subscribe.stats"}`)
			if m := ws.expect("error"); m["message"] != "Already subscribed to stats" {
				t.Fatalf("second subscribe.stats answered %v", m)
			}
			if _, err := one.engine.Start(t.Context(), "sf", json.RawMessage(`{}`), ""); err != nil {
				t.Fatal(err)
			}
			// A read of the counts can straddle the start (one count before
			// it, the next after); the next read has them both.
			for {
				m = ws.expect("flow.stats.update")
				data, _ = m["data"].(map[string]any)
				meta, _ = data["metadata"].(map[string]any)
				if stats, _ := meta["stats"].(map[string]any); stats["total"] == float64(2) && stats["running"] == float64(2) {
					break
				}
			}
			ws.send(`{"type":"unsubscribe.stats"}`)
			ws.expect("stats.unsubscribed")
		})
	}
}

// TestSocketOrigin: a page of another origin may not open a socket unless
// NQ_CORS_ORIGINS names it; the same origin and non-browsers may.
func TestSocketOrigin(t *testing.T) {
	st := openSocketStores(t, "bolt", 1)[0]
	n := startSocketNode(t, st, func(d *handlers.Deps) { d.CORSOrigins = []string{"https://ui.example"} })
	for _, path := range []string{"/api/_flows/ws", "/api/_queues/ws", "/api/_triggers/ws"} {
		_, err := dialSocketErr(t, n.url, path, http.Header{"Origin": {"https://evil.example"}})
		if err == nil || !strings.Contains(err.Error(), "status 403") {
			t.Errorf("%s from a foreign origin: %v, want 403", path, err)
		}
		for _, origin := range []string{n.url, "https://ui.example", ""} {
			ws := dialSocket(t, n.url, path, http.Header{"Origin": {origin}})
			ws.expect("connected")
		}
	}
}

// TestSocketShutdown: shutting down tells each socket the server restarts
// and closes it with 1001, and refuses new sockets.
func TestSocketShutdown(t *testing.T) {
	n := startSocketNode(t, openSocketStores(t, "bolt", 1)[0])
	ws := dialSocket(t, n.url, "/api/_flows/ws", nil)
	ws.expect("connected")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := n.api.DrainSockets(ctx); err != nil {
		t.Fatal(err)
	}
	if m := ws.expect("server-restart"); m["message"] == "" {
		t.Errorf("server-restart %v has no message", m)
	}
	if err := ws.closed(); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("closed with %v, want 1001", err)
	}
	if _, err := dialSocketErr(t, n.url, "/api/_flows/ws", nil); err == nil || !strings.Contains(err.Error(), "status 503") {
		t.Fatalf("a socket while draining: %v, want 503", err)
	}
}

// TestSocketAccess: with access control on, a socket needs a read token
// (header) or a stream token (query) that covers what it subscribes to.
func TestSocketAccess(t *testing.T) {
	st := openSocketStores(t, "bolt", 1)[0]
	n := startSocketNode(t, st, withTokens(t, handlers.Access{}))
	appendTo(t, st, store.Context{Type: "flow", ID: "r1"}, stepEvent("r1", 0))
	if _, err := dialSocketErr(t, n.url, "/api/_flows/ws", nil); err == nil || !strings.Contains(err.Error(), "status 401") {
		t.Fatalf("no token: %v, want 401", err)
	}
	ws := dialSocket(t, n.url, "/api/_flows/ws", http.Header{"Authorization": {"Bearer " + readSecret}})
	ws.expect("connected")
	ws.send(`{"type":"subscribe","flowName":"sf","runId":"r1"}`)
	ws.expect("history")

	req, _ := http.NewRequest("POST", n.url+"/api/_auth/stream-token", strings.NewReader(`{"type":"flow","id":"r1"}`))
	req.Header.Set("Authorization", "Bearer "+readSecret)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var tok struct{ Token string }
	if err := json.NewDecoder(res.Body).Decode(&tok); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	ws = dialSocket(t, n.url, "/api/_flows/ws?access_token="+tok.Token, nil)
	ws.expect("connected")
	ws.send(`{"type":"subscribe","flowName":"sf","runId":"r2"}`)
	if m := ws.expect("error"); !strings.HasPrefix(m["message"].(string), "Forbidden") {
		t.Fatalf("a run the stream token does not cover: %v", m)
	}
	ws.send(`{"type":"subscribe","flowName":"sf","runId":"r1"}`)
	ws.expect("history")
}

// TestTriggerSocket: a trigger's stream, whole then live, with bare records
// whose ts is a number.
func TestTriggerSocket(t *testing.T) {
	for _, backend := range socketBackends {
		t.Run(backend, func(t *testing.T) {
			n := startSocketNode(t, openSocketStores(t, backend, 1)[0])
			c := store.Context{Type: "trigger", ID: "tr"}
			fired := event.Event{Kind: "trigger.fired", Subject: "tr", Data: json.RawMessage(`{"n":1}`)}
			first := appendTo(t, n.st, c, fired)
			ws := dialSocket(t, n.url, "/api/_triggers/ws", nil)
			ws.expect("connected")
			ws.send(`{"type":"subscribe","triggerName":"tr"}`)
			h := ws.expect("history")
			evs, _ := h["events"].([]any)
			if len(evs) != 1 || h["triggerName"] != "tr" {
				t.Fatalf("history %v", h)
			}
			rec := evs[0].(map[string]any)
			if rec["id"] != first[0].ID.String() || rec["ts"] != float64(first[0].ID.MS) || rec["type"] != "trigger.fired" || rec["triggerName"] != "tr" {
				t.Fatalf("record %v", rec)
			}
			ws.expect("subscribed")
			live := appendTo(t, n.st, c, fired)
			m := ws.expect("event")
			if ev, _ := m["event"].(map[string]any); ev["id"] != live[0].ID.String() || m["triggerName"] != "tr" {
				t.Fatalf("live %v", m)
			}
			ws.send(`{"type":"subscribe.stats"}`)
			ws.expect("stats.subscribed")
			ws.send(`{"type":"unsubscribe","triggerName":"tr"}`)
			ws.expect("unsubscribed")
			ws.send(`{"type":"ping"}`)
			ws.expect("pong")
		})
	}
}

// TestQueueSocket: a queue's counts, then an event and fresh counts when a
// job enters it, from another instance than the socket's.
func TestQueueSocket(t *testing.T) {
	for _, backend := range socketBackends {
		t.Run(backend, func(t *testing.T) {
			sts := openSocketStores(t, backend, 2)
			one := startSocketNode(t, sts[0])
			two := one
			if len(sts) > 1 {
				two = startSocketNode(t, sts[1])
			}
			ws := dialSocket(t, two.url, "/api/_queues/ws", nil)
			ws.expect("connected")
			ws.send(`{"type":"subscribe","queueName":"sq"}`)
			m := ws.expect("counts")
			if counts, _ := m["counts"].(map[string]any); m["queueName"] != "sq" || counts["waiting"] != float64(0) {
				t.Fatalf("counts %v", m)
			}
			ws.expect("subscribed")
			if _, err := one.engine.Start(t.Context(), "sf", json.RawMessage(`{}`), ""); err != nil {
				t.Fatal(err)
			}
			m = ws.expect("event")
			if ev, _ := m["event"].(map[string]any); ev["eventType"] != "waiting" || m["queueName"] != "sq" {
				t.Fatalf("event %v, want waiting", m)
			}
			m = ws.expect("counts")
			if counts, _ := m["counts"].(map[string]any); counts["waiting"] != float64(1) {
				t.Fatalf("counts after the job %v", m)
			}
			ws.send(`{"type":"ping"}`)
			ws.expect("pong")
			ws.send(`{"type":"unsubscribe","queueName":"sq"}`)
			ws.expect("unsubscribed")
		})
	}
}

// TestQueueSocketWorkers: the counts carry the queue's workers and whether
// jobs wait with none, as the HTTP queue list does, and a worker arriving
// sends fresh counts though the counts did not change.
func TestQueueSocketWorkers(t *testing.T) {
	for _, backend := range socketBackends {
		t.Run(backend, func(t *testing.T) {
			sts := openSocketStores(t, backend, 2)
			withWorkers := func(st socketStore) func(*handlers.Deps) {
				return func(d *handlers.Deps) { d.State = newStates(t, st) }
			}
			one := startSocketNode(t, sts[0], withWorkers(sts[0]))
			two := one
			if len(sts) > 1 {
				two = startSocketNode(t, sts[1], withWorkers(sts[1]))
			}
			reg := registry.New(one.st.(registry.Store), one.st.(registry.KV), registry.Options{Log: testkit.Logger(t)})
			if _, err := one.engine.Start(t.Context(), "sf", json.RawMessage(`{}`), ""); err != nil {
				t.Fatal(err)
			}
			ws := dialSocket(t, two.url, "/api/_queues/ws", nil)
			ws.expect("connected")
			ws.send(`{"type":"subscribe","queueName":"sq"}`)
			m := ws.expect("counts")
			if counts, _ := m["counts"].(map[string]any); counts["waiting"] != float64(1) || m["workers"] != float64(0) || m["unserved"] != true {
				t.Fatalf("counts of a queue with a job and no worker: %v", m)
			}
			if _, ok := m["counts"].(map[string]any)["workers"]; ok {
				t.Fatalf("workers inside counts, which the UI shows key by key: %v", m)
			}
			ws.expect("subscribed")

			hello := registry.Hello{ID: "w1", Queues: []string{"sq", "idle"}, Concurrency: 2, Transport: registry.TransportChannel}
			if err := reg.Arrive(t.Context(), hello); err != nil {
				t.Fatal(err)
			}
			m = ws.expect("counts")
			if counts, _ := m["counts"].(map[string]any); counts["waiting"] != float64(1) || m["workers"] != float64(1) || m["unserved"] != false {
				t.Fatalf("counts once a worker serves the queue: %v", m)
			}
			// A queue no flow uses yet shows its workers too.
			ws.send(`{"type":"subscribe","queueName":"idle"}`)
			m = ws.expect("counts")
			if m["queueName"] != "idle" || m["workers"] != float64(1) || m["unserved"] != false {
				t.Fatalf("counts of a queue with a worker and no jobs: %v", m)
			}
			ws.expect("subscribed")
		})
	}
}

// TestSlowSocketIsCut: a client that stops reading while its run grows is
// cut at the SSE queue bound rather than held in memory.
func TestSlowSocketIsCut(t *testing.T) {
	st := openSocketStores(t, "bolt", 1)[0]
	n := startSocketNode(t, st, func(d *handlers.Deps) {
		d.Feeds = stream.NewHandler(stream.Options{Store: st, Log: testkit.Logger(t), TrustLive: true, QueueEvents: 4})
		d.Sockets.WriteTimeout = 200 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(n.url, "http")+"/api/_flows/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"subscribe","flowName":"sf","runId":"big"}`)); err != nil {
		t.Fatal(err)
	}
	// The client reads nothing until the run has grown far past what the
	// connection's buffers hold; each event is large.
	const total = 400
	big := json.RawMessage(`{"blob":"` + strings.Repeat("x", 64<<10) + `"}`)
	run := store.Context{Type: "flow", ID: "big"}
	batch := make([]event.Event, 20)
	for i := range batch {
		batch[i] = event.Event{Kind: "log", RunID: "big", Subject: "big", Data: big}
	}
	for range total / len(batch) {
		appendTo(t, st, run, batch...)
	}
	received := 0
	for {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		_, _, err := c.Read(rctx)
		rcancel()
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the socket is still open after %d messages", received)
		}
		if err != nil {
			break
		}
		received++
	}
	// connected, history and subscribed come before the events.
	if received >= total+3 {
		t.Fatalf("received all %d messages: the socket was not cut", received)
	}
}

// TestTriggerSocketStats: subscribe.stats answers each registered
// trigger's metadata, then an update when it fires, read from the registry
// in the store by another instance than the one it fired on.
func TestTriggerSocketStats(t *testing.T) {
	for _, backend := range socketBackends {
		t.Run(backend, func(t *testing.T) {
			sts := openSocketStores(t, backend, 2)
			registry := func(st socketStore) *triggers.Registry {
				return triggers.New(st, newStates(t, st), engine.New(st, engine.Options{Logger: testkit.Logger(t)}), triggers.Options{Logger: testkit.Logger(t)})
			}
			one := registry(sts[0])
			two := startSocketNode(t, sts[len(sts)-1], func(d *handlers.Deps) { d.TriggerList = registry(sts[len(sts)-1]) })
			if _, err := one.Create(t.Context(), triggers.Spec{Name: "tm", Type: "manual", Subscriptions: []string{"sf"}}); err != nil {
				t.Fatal(err)
			}
			ws := dialSocket(t, two.url, "/api/_triggers/ws", nil)
			ws.expect("connected")
			ws.send(`{"type":"subscribe.stats"}`)
			m := ws.expect("trigger.stats.initial")
			data, _ := m["data"].(map[string]any)
			meta, _ := data["metadata"].(map[string]any)
			if data["id"] != "tm" || meta["type"] != "manual" || meta["stats.totalFires"] != float64(0) {
				t.Fatalf("initial %v", m)
			}
			ws.expect("stats.subscribed")
			ws.send(`{"type":"subscribe.stats"}`)
			if m := ws.expect("error"); m["message"] != "Already subscribed to stats" {
				t.Fatalf("second subscribe.stats answered %v", m)
			}
			if _, err := one.Fire(t.Context(), "tm", json.RawMessage(`{}`), "", nil); err != nil {
				t.Fatal(err)
			}
			for {
				m = ws.expect("trigger.stats.update")
				data, _ = m["data"].(map[string]any)
				meta, _ = data["metadata"].(map[string]any)
				if stats, _ := meta["stats"].(map[string]any); stats["totalFires"] == float64(1) {
					break
				}
			}
			ws.send(`{"type":"unsubscribe.stats"}`)
			ws.expect("stats.unsubscribed")
		})
	}
}

// TestSocketCapAndExpiry: a socket holds one of its client's stream slots,
// shared with the SSE streams, until it ends; one opened with a stream
// token is closed (1008) when the token expires.
func TestSocketCapAndExpiry(t *testing.T) {
	st := openSocketStores(t, "bolt", 1)[0]
	n := startSocketNode(t, st, withTokens(t, handlers.Access{MaxStreams: 1}))
	auth := http.Header{"Authorization": {"Bearer " + readSecret}}
	first := dialSocket(t, n.url, "/api/_flows/ws", auth)
	first.expect("connected")
	if _, err := dialSocketErr(t, n.url, "/api/_queues/ws", auth); err == nil || !strings.Contains(err.Error(), "status 429") {
		t.Fatalf("a second socket over the cap: %v, want 429", err)
	}
	_ = first.c.Close(websocket.StatusNormalClosure, "")
	first.closed()

	req, _ := http.NewRequest("POST", n.url+"/api/_auth/stream-token", strings.NewReader(`{"type":"flow","id":"*","ttl":3}`))
	req.Header = auth.Clone()
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var tok struct{ Token string }
	if err := json.NewDecoder(res.Body).Decode(&tok); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	// The slot comes back once the server has seen the first socket end.
	deadline := time.Now().Add(5 * time.Second)
	ws, err := dialSocketErr(t, n.url, "/api/_flows/ws?access_token="+tok.Token, nil)
	for err != nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // a poll for the slot, bounded by the deadline
		ws, err = dialSocketErr(t, n.url, "/api/_flows/ws?access_token="+tok.Token, nil)
	}
	if err != nil {
		t.Fatalf("the slot never came back: %v", err)
	}
	ws.expect("connected")
	if err := ws.closed(); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("at the token's expiry: %v, want close 1008", err)
	}
}
