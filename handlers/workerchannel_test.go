package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/registry"
	"github.com/nqd-dev/nqd/store"
)

// channelNode is an nqd instance serving the worker channel through the
// real router, with a one-step flow "one" on queue "q" and the worker
// registry.
type channelNode struct {
	url string
	api *handlers.API
	e   *engine.Engine
	st  socketStore
}

func newChannelNode(t *testing.T, st socketStore, opts ...func(*handlers.Deps)) *channelNode {
	t.Helper()
	log := testkit.Logger(t)
	e := engine.New(st, engine.Options{Logger: log})
	d := &flows.Definition{Name: "one", Entry: "work", Steps: map[string]flows.Step{"work": {Queue: "q"}}}
	if err := e.PutDefinition(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	deps := handlers.Deps{Store: st, Engine: e, Log: log}
	if rs, ok := st.(interface {
		registry.Store
		registry.KV
	}); ok {
		deps.Workers = registry.New(rs, rs, registry.Options{Log: log})
	}
	for _, opt := range opts {
		opt(&deps)
	}
	api := handlers.New(deps)
	srv := httptest.NewServer(api.Routes())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		api.StopLongPolls()
		_ = api.DrainSockets(ctx)
		srv.Close()
	})
	return &channelNode{url: srv.URL, api: api, e: e, st: st}
}

// frame is any frame nqd sends on the channel.
type frame struct {
	Type   string          `json:"type"`
	Ref    string          `json:"ref"`
	Body   json.RawMessage `json:"body"`
	Status int             `json:"status"`
	Error  struct {
		Code    string            `json:"code"`
		Message string            `json:"message"`
		Fields  map[string]string `json:"fields"`
	} `json:"error"`
	Message     string      `json:"message"`
	Jobs        []store.Job `json:"jobs"`
	LeaseMs     int64       `json:"leaseMs"`
	HeartbeatMs int64       `json:"heartbeatMs"`
	NextInAck   bool        `json:"nextInAck"`
}

// testChannel is a worker's end of a channel.
type testChannel struct {
	t  *testing.T
	ws *websocket.Conn
}

func dialChannel(t *testing.T, n *channelNode, header http.Header) (*testChannel, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	ws, res, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(n.url, "http")+"/api/_workers/channel", &websocket.DialOptions{HTTPHeader: header})
	if err != nil {
		return nil, res, err
	}
	ws.SetReadLimit(16 << 20)
	t.Cleanup(func() { _ = ws.CloseNow() })
	return &testChannel{t: t, ws: ws}, res, nil
}

// hello opens a channel and says hello with concurrency.
func hello(t *testing.T, n *channelNode, concurrency int) *testChannel {
	t.Helper()
	c, _, err := dialChannel(t, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.send(map[string]any{"type": "hello", "workerId": "w-1", "name": "test", "sdk": "go", "version": "1",
		"host": "box", "queues": []string{"q"}, "concurrency": concurrency})
	if w := c.next(); w.Type != "welcome" || w.LeaseMs != engine.DefaultLease.Milliseconds() || w.HeartbeatMs != w.LeaseMs/3 || !w.NextInAck {
		t.Fatalf("hello answered %+v; want a welcome with the lease, a third of it and nextInAck", w)
	}
	return c
}

func (c *testChannel) send(v any) {
	c.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := c.ws.Write(c.t.Context(), websocket.MessageText, b); err != nil {
		c.t.Fatalf("send %s: %v", b, err)
	}
}

// next reads the next frame, failing the test when none comes in time.
func (c *testChannel) next() frame {
	c.t.Helper()
	f, err := c.read()
	if err != nil {
		c.t.Fatalf("read a frame: %v", err)
	}
	return f
}

func (c *testChannel) read() (frame, error) {
	ctx, cancel := context.WithTimeout(c.t.Context(), 10*time.Second)
	defer cancel()
	_, b, err := c.ws.Read(ctx)
	if err != nil {
		return frame{}, err
	}
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		c.t.Fatalf("frame %s: %v", b, err)
	}
	return f, nil
}

// offer reads the next frame, which must offer one job.
func (c *testChannel) offer() store.Job {
	c.t.Helper()
	f := c.next()
	if f.Type != "offer" || len(f.Jobs) != 1 {
		c.t.Fatalf("got %+v; want an offer of one job", f)
	}
	return f.Jobs[0]
}

// call sends a request about job j and returns its answer.
func (c *testChannel) call(typ, ref string, j store.Job, fields map[string]any) frame {
	c.t.Helper()
	m := map[string]any{"type": typ, "ref": ref, "queue": j.Queue, "jobId": j.ID, "lease": j.Lease}
	for k, v := range fields {
		m[k] = v
	}
	c.send(m)
	f := c.next()
	if f.Ref != ref || (f.Type != "ack" && f.Type != "error") {
		c.t.Fatalf("%s %s answered %+v; want its ack or error", typ, ref, f)
	}
	return f
}

// closedWith waits for the channel to end and reports nqd's close status.
func (c *testChannel) closedWith() websocket.StatusCode {
	for {
		if _, err := c.read(); err != nil {
			return websocket.CloseStatus(err)
		}
	}
}

func startRuns(t *testing.T, e *engine.Engine, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		s, err := e.Start(t.Context(), "one", json.RawMessage(`{"n":1}`), "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.FlowID)
	}
	return ids
}

func kinds(t *testing.T, st store.Store, run string) map[string]int {
	t.Helper()
	evs, err := st.Range(t.Context(), store.Context{Type: "flow", ID: run}, store.RangeQuery{})
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, ev := range evs {
		n[ev.Kind]++
	}
	return n
}

// TestWorkerChannel: jobs are offered as slots free up and not beyond
// them, and every report is answered as its HTTP call is, repeats
// included, on every store.
func TestWorkerChannel(t *testing.T) {
	for _, backend := range socketBackends {
		t.Run(backend, func(t *testing.T) {
			n := newChannelNode(t, openSocketStores(t, backend, 1)[0])
			c := hello(t, n, 1)
			runs := startRuns(t, n.e, 2)
			j := c.offer()
			if j.Attempt != 1 || string(j.Input) != `{"n":1}` || j.Lease == "" {
				t.Fatalf("offered %+v; want attempt 1 of a run with its input", j)
			}
			// One slot, taken: the answer to a heartbeat comes before any
			// further offer.
			beat := c.call("heartbeat", "h1", j, nil)
			var b engine.Beat
			if beat.Type != "ack" || json.Unmarshal(beat.Body, &b) != nil || b.Canceled || b.LeaseUntil.IsZero() {
				t.Fatalf("heartbeat answered %+v", beat)
			}
			events := map[string]any{"idempotencyKey": "k-1", "events": []map[string]any{
				{"kind": "step.started"}, {"kind": "log", "data": map[string]any{"level": "info", "msg": "once"}}}}
			first, again := c.call("events", "e1", j, events), c.call("events", "e2", j, events)
			if first.Type != "ack" || string(first.Body) != string(again.Body) || !strings.Contains(string(first.Body), `"kind":"log"`) {
				t.Fatalf("events answered %+v, repeated %+v; want the stored events twice", first, again)
			}
			done := c.call("complete", "c1", j, map[string]any{"result": map[string]any{"ok": true}, "next": true})
			if done.Type != "ack" || string(done.Body) != `{"status":"ok"}` {
				t.Fatalf("complete answered %+v", done)
			}
			j2 := c.offer() // the slot's next job
			if again := c.call("complete", "c2", j, map[string]any{"result": map[string]any{"ok": true}}); again.Type != "ack" {
				t.Fatalf("a repeated complete answered %+v; want ack", again)
			}
			late := c.call("fail", "f1", j, map[string]any{"error": "late"})
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/api/_workers/jobs/q/"+j.ID+"/fail", strings.NewReader(fmt.Sprintf(`{"lease":%q,"error":"late"}`, j.Lease)))
			n.api.Routes().ServeHTTP(rec, req)
			var overHTTP struct {
				Error struct{ Code, Message string }
			}
			_ = json.Unmarshal(rec.Body.Bytes(), &overHTTP)
			if late.Type != "error" || late.Status != rec.Code || late.Status != http.StatusConflict ||
				late.Error.Code != overHTTP.Error.Code || late.Error.Message != overHTTP.Error.Message {
				t.Fatalf("a fail after the complete answered %+v; over HTTP %d %s", late, rec.Code, rec.Body)
			}
			if ok := c.call("complete", "c3", j2, nil); ok.Type != "ack" {
				t.Fatalf("complete answered %+v", ok)
			}
			for _, run := range runs {
				k := kinds(t, n.st, run)
				if k["step.completed"] != 1 || k["flow.completed"] != 1 {
					t.Errorf("run %s: %v; want one step.completed and flow.completed", run, k)
				}
			}
			if k := kinds(t, n.st, j.RunID); k["log"] != 1 || k["step.started"] != 1 {
				t.Errorf("run %s: %v; want the repeated events stored once", j.RunID, k)
			}
		})
	}
}

// TestWorkerChannelNextJob: a slot freed by a completion with next when no
// job was ready takes the job started next (handed to it while it waits,
// or offered once it is free), and only one, on every store.
func TestWorkerChannelNextJob(t *testing.T) {
	for _, backend := range socketBackends {
		t.Run(backend, func(t *testing.T) {
			n := newChannelNode(t, openSocketStores(t, backend, 1)[0])
			c := hello(t, n, 1)
			startRuns(t, n.e, 1)
			j := c.offer()
			if done := c.call("complete", "c1", j, map[string]any{"next": true}); done.Type != "ack" {
				t.Fatalf("complete answered %+v", done)
			}
			runs := startRuns(t, n.e, 2)
			j2 := c.offer()
			if j2.RunID != runs[0] && j2.RunID != runs[1] {
				t.Fatalf("offered %+v; want a job of a run started after the completion", j2)
			}
			// The slot is taken: the answer to a heartbeat comes before
			// any further offer.
			if beat := c.call("heartbeat", "h1", j2, nil); beat.Type != "ack" {
				t.Fatalf("heartbeat answered %+v", beat)
			}
			if done := c.call("complete", "c2", j2, map[string]any{"next": true}); done.Type != "ack" {
				t.Fatalf("complete answered %+v", done)
			}
			if j3 := c.offer(); j3.RunID == j2.RunID || (j3.RunID != runs[0] && j3.RunID != runs[1]) {
				t.Fatalf("offered %+v after %+v; want the other run's job", j3, j2)
			}
		})
	}
}

// TestWorkerChannelNextInAck: a completion with next and nextInAck takes
// the slot's next job in its ack, which is then the only frame: a job
// ready at once, or one started while the slot waits; a wait that finds
// none answers no jobs and leaves the slot free for an offer, on every
// store.
func TestWorkerChannelNextInAck(t *testing.T) {
	for _, backend := range socketBackends {
		t.Run(backend, func(t *testing.T) {
			n := newChannelNode(t, openSocketStores(t, backend, 1)[0])
			c := hello(t, n, 1)
			runs := startRuns(t, n.e, 2)
			j := c.offer()
			next := map[string]any{"next": true, "nextInAck": true}
			var body struct {
				Status string
				Jobs   []store.Job
			}
			done := c.call("complete", "c1", j, next)
			if done.Type != "ack" || json.Unmarshal(done.Body, &body) != nil || body.Status != "ok" || len(body.Jobs) != 1 {
				t.Fatalf("complete answered %+v; want an ack with the slot's next job", done)
			}
			j2 := body.Jobs[0]
			if j2.RunID == j.RunID || (j2.RunID != runs[0] && j2.RunID != runs[1]) || j2.Lease == "" {
				t.Fatalf("the ack brought %+v after %+v; want the other run's job", j2, j)
			}
			// The slot is taken: no offer comes before the heartbeat's ack.
			if beat := c.call("heartbeat", "h1", j2, nil); beat.Type != "ack" {
				t.Fatalf("heartbeat answered %+v", beat)
			}
			// No job is ready: the ack answers none once its wait is over,
			// and the slot is free for the run started after it.
			body.Jobs = nil
			done = c.call("complete", "c2", j2, next)
			if done.Type != "ack" || json.Unmarshal(done.Body, &body) != nil || body.Jobs == nil || len(body.Jobs) != 0 {
				t.Fatalf("complete answered %+v; want an ack with no jobs", done)
			}
			later := startRuns(t, n.e, 1)
			if j3 := c.offer(); j3.RunID != later[0] {
				t.Fatalf("offered %+v; want the job of the run started last", j3)
			}
			if k := kinds(t, n.st, j2.RunID); k["step.completed"] != 1 || k["flow.completed"] != 1 {
				t.Errorf("run %s: %v; want one step.completed and flow.completed", j2.RunID, k)
			}
			if f := c.call("complete", "c3", j2, map[string]any{"nextInAck": true}); f.Type != "error" ||
				f.Status != http.StatusBadRequest || f.Error.Fields["nextInAck"] == "" {
				t.Fatalf("nextInAck without next answered %+v; want a 400 naming the field", f)
			}
		})
	}
}

// TestWorkerChannelRefusals: a frame nqd cannot take is answered with the
// HTTP call's error; a channel that breaks its opening rules is closed.
func TestWorkerChannelRefusals(t *testing.T) {
	n := newChannelNode(t, openSocketStores(t, "bolt", 1)[0])

	t.Run("a frame before the hello", func(t *testing.T) {
		c, _, err := dialChannel(t, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.send(map[string]any{"type": "heartbeat", "ref": "r", "queue": "q", "jobId": "a:b", "lease": "l"})
		if f := c.next(); f.Type != "error" || f.Ref != "r" || f.Status != http.StatusBadRequest {
			t.Errorf("answered %+v; want a 400 error", f)
		}
		if s := c.closedWith(); s != websocket.StatusPolicyViolation {
			t.Errorf("closed with %v; want 1008", s)
		}
	})
	t.Run("a bad hello", func(t *testing.T) {
		c, _, err := dialChannel(t, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.send(map[string]any{"type": "hello", "workerId": "w", "queues": []string{"no/pe"}, "concurrency": 1})
		if f := c.next(); f.Type != "error" || f.Status != http.StatusBadRequest || f.Error.Fields["queues[0]"] == "" {
			t.Errorf("answered %+v; want a 400 naming queues[0]", f)
		}
		if s := c.closedWith(); s != websocket.StatusPolicyViolation {
			t.Errorf("closed with %v; want 1008", s)
		}
	})
	t.Run("bad requests", func(t *testing.T) {
		c := hello(t, n, 1)
		startRuns(t, n.e, 1)
		j := c.offer()
		if f := c.call("events", "u", j, map[string]any{"events": []map[string]any{{"kind": "log"}}, "nope": 1}); f.Status != http.StatusBadRequest {
			t.Errorf("an unknown field answered %+v; want 400", f)
		}
		if f := c.call("events", "k", j, map[string]any{"events": []map[string]any{{"kind": "step.completed"}}}); f.Status != http.StatusBadRequest || f.Error.Fields["events[0].kind"] == "" {
			t.Errorf("a lifecycle kind answered %+v; want 400 naming events[0].kind", f)
		}
		if f := c.call("heartbeat", "l", store.Job{Queue: j.Queue, ID: j.ID, Lease: "other"}, nil); f.Status != http.StatusConflict {
			t.Errorf("another lease answered %+v; want 409", f)
		}
		if f := c.call("complete", "x", j, map[string]any{"claim": map[string]any{"queues": []string{"q"}}}); f.Status != http.StatusBadRequest || f.Error.Fields["claim"] == "" {
			t.Errorf("a claim on the channel answered %+v; want 400 naming claim", f)
		}
		c.send(map[string]any{"type": "heartbeat", "queue": j.Queue, "jobId": j.ID, "lease": j.Lease})
		if f := c.next(); f.Type != "error" || f.Ref != "" || f.Error.Fields["ref"] == "" {
			t.Errorf("a request without a ref answered %+v; want an error naming ref", f)
		}
		c.send(map[string]any{"type": "claim"})
		if f := c.next(); f.Type != "error" || !strings.Contains(f.Message, "Unknown message type") {
			t.Errorf("an unknown type answered %+v", f)
		}
	})
}

// TestWorkerChannelTokens: the channel needs the write scope, refused
// before the upgrade as every worker call is.
func TestWorkerChannelTokens(t *testing.T) {
	st := openSocketStores(t, "bolt", 1)[0]
	toks, err := auth.ParseTokens("reader:read:" + readSecret + ",writer:write:" + writeSecret)
	if err != nil {
		t.Fatal(err)
	}
	n := newChannelNode(t, st, func(d *handlers.Deps) {
		d.Access = handlers.Access{Auth: auth.New(auth.NewTokens(toks), nil, nil)}
	})
	for _, tc := range []struct {
		secret string
		want   int
	}{{"", http.StatusUnauthorized}, {readSecret, http.StatusForbidden}, {writeSecret, http.StatusSwitchingProtocols}} {
		h := http.Header{}
		if tc.secret != "" {
			h.Set("Authorization", "Bearer "+tc.secret)
		}
		_, res, err := dialChannel(t, n, h)
		if res == nil || res.StatusCode != tc.want || (tc.want == http.StatusSwitchingProtocols) != (err == nil) {
			t.Errorf("secret %q: %v, %v; want %d", tc.secret, res, err, tc.want)
		}
	}
}

// TestWorkerChannelDrop: a channel that drops withdraws nothing: the job
// it was offered is completed over HTTP with its lease, and a new channel
// is offered the next job. The registry hears the worker arrive, and leave
// only once it closes its channel itself.
func TestWorkerChannelDrop(t *testing.T) {
	n := newChannelNode(t, openSocketStores(t, "bolt", 1)[0])
	c := hello(t, n, 1)
	runs := startRuns(t, n.e, 2)
	j := c.offer()
	_ = c.ws.CloseNow()

	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/api/_workers/jobs/q/"+j.ID+"/complete", strings.NewReader(fmt.Sprintf(`{"lease":%q}`, j.Lease)))
	n.api.Routes().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("complete over HTTP after the drop: %d %s", rec.Code, rec.Body)
	}
	c = hello(t, n, 1)
	if j2 := c.offer(); j2.RunID == j.RunID || !slices.Contains(runs, j2.RunID) {
		t.Fatalf("the new channel was offered %+v; want the other run of %v", j2, runs)
	}
	if err := c.ws.Close(websocket.StatusNormalClosure, "bye"); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	wait.For(t, 10*time.Second, 10*time.Millisecond, "the worker's departure in the registry stream", func() bool {
		evs, err := n.st.Range(t.Context(), registry.Stream, store.RangeQuery{})
		if err != nil {
			t.Fatal(err)
		}
		kinds = kinds[:0]
		for _, ev := range evs {
			kinds = append(kinds, ev.Kind)
		}
		return slices.Contains(kinds, registry.KindLeft)
	})
	if kinds[0] != registry.KindRegistered || slices.Index(kinds, registry.KindLeft) != len(kinds)-1 {
		t.Errorf("the registry stream holds %v; want the worker registered first and leaving once, last", kinds)
	}
}

// TestWorkerChannelShutdown: a server that shuts down tells the worker to
// reconnect and closes with 1001.
func TestWorkerChannelShutdown(t *testing.T) {
	n := newChannelNode(t, openSocketStores(t, "bolt", 1)[0])
	c := hello(t, n, 1)
	n.api.StopLongPolls()
	errc := make(chan error, 1)
	go func() { errc <- n.api.DrainSockets(t.Context()) }()
	if f := c.next(); f.Type != "server-restart" {
		t.Errorf("got %+v; want server-restart", f)
	}
	if s := c.closedWith(); s != websocket.StatusGoingAway {
		t.Errorf("closed with %v; want 1001", s)
	}
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Error(err)
	}
}

// TestWorkerChannelLargeData: step data over the threshold travels by
// reference as over HTTP: an offer holds the run's large input resolved,
// and a large result is acked and stored by reference.
func TestWorkerChannelLargeData(t *testing.T) {
	n := newChannelNode(t, openSocketStores(t, "bolt", 1)[0], withData(t, 1024, 0))
	c := hello(t, n, 1)
	input := bigInput(4096, "a")
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/api/_flows/one/start", strings.NewReader(input))
	req.Header.Set("Content-Type", "application/json")
	n.api.Routes().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("start: %d %s", rec.Code, rec.Body)
	}
	j := c.offer()
	if string(j.Input) != input {
		t.Fatalf("offered input of %d bytes; want the run's input resolved (%d bytes)", len(j.Input), len(input))
	}
	result := json.RawMessage(bigInput(4096, "result"))
	if f := c.call("complete", "c", j, map[string]any{"result": result}); f.Type != "ack" {
		t.Fatalf("complete answered %+v", f)
	}
	evs, err := n.st.Range(t.Context(), store.Context{Type: "flow", ID: j.RunID}, store.RangeQuery{})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(evs, func(ev event.Event) bool { return ev.Kind == "step.completed" })
	if i < 0 || !strings.Contains(string(evs[i].Data), `"$nqdRef"`) {
		t.Errorf("events %v; want a step.completed with the result by reference", evs)
	}
}

// TestWorkerChannelQueueConcurrency: a hello's queueConcurrency caps the
// jobs of each queue the channel is offered, a freed slot of a full queue
// takes that queue's next job, and held counts the jobs a reconnecting
// worker still runs, on every store.
func TestWorkerChannelQueueConcurrency(t *testing.T) {
	for _, backend := range socketBackends {
		t.Run(backend, func(t *testing.T) {
			n := newChannelNode(t, openSocketStores(t, backend, 1)[0])
			for _, q := range []string{"a", "b"} {
				d := &flows.Definition{Name: "f" + q, Entry: "work", Steps: map[string]flows.Step{"work": {Queue: q}}}
				if err := n.e.PutDefinition(t.Context(), d); err != nil {
					t.Fatal(err)
				}
				for range 3 {
					if _, err := n.e.Start(t.Context(), "f"+q, json.RawMessage(`{}`), ""); err != nil {
						t.Fatal(err)
					}
				}
			}
			c, _, err := dialChannel(t, n, nil)
			if err != nil {
				t.Fatal(err)
			}
			c.send(map[string]any{"type": "hello", "workerId": "w-1", "queues": []string{"a", "b"}, "concurrency": 3,
				"queueConcurrency": map[string]int{"a": 1, "b": 2}})
			if w := c.next(); w.Type != "welcome" {
				t.Fatalf("hello answered %+v", w)
			}
			held := map[string][]store.Job{}
			for got := 0; got < 3; {
				f := c.next()
				if f.Type != "offer" {
					t.Fatalf("got %+v; want offers", f)
				}
				for _, j := range f.Jobs {
					held[j.Queue] = append(held[j.Queue], j)
				}
				got += len(f.Jobs)
			}
			if len(held["a"]) != 1 || len(held["b"]) != 2 {
				t.Fatalf("offered %d jobs of a and %d of b; want 1 and 2", len(held["a"]), len(held["b"]))
			}
			// Every slot is taken: the answer to a heartbeat comes before
			// any further offer.
			if beat := c.call("heartbeat", "h1", held["a"][0], nil); beat.Type != "ack" {
				t.Fatalf("heartbeat answered %+v", beat)
			}
			// b is full: the slot a completion of a frees takes a's next job.
			if done := c.call("complete", "c1", held["a"][0], map[string]any{"next": true}); done.Type != "ack" {
				t.Fatalf("complete answered %+v", done)
			}
			if j := c.offer(); j.Queue != "a" {
				t.Fatalf("offered %+v after a's job; want a's next job", j)
			}

			// A worker that reconnects holding a job of a, its only room
			// there, is offered a's job only once it frees that slot.
			c2, _, err := dialChannel(t, n, nil)
			if err != nil {
				t.Fatal(err)
			}
			c2.send(map[string]any{"type": "hello", "workerId": "w-2", "queues": []string{"a"}, "concurrency": 2, "slots": 1,
				"queueConcurrency": map[string]int{"a": 1}, "held": map[string]int{"a": 1}})
			if w := c2.next(); w.Type != "welcome" {
				t.Fatalf("hello answered %+v", w)
			}
			c2.send(map[string]any{"type": "slots", "add": 0})
			if f := c2.next(); f.Type != "error" || f.Error.Fields["add"] == "" {
				t.Fatalf("got %+v before the slot of a was freed; want the bad slots frame's error", f)
			}
			c2.send(map[string]any{"type": "slots", "add": 1, "queue": "a"})
			if j := c2.offer(); j.Queue != "a" {
				t.Fatalf("offered %+v; want a's last job", j)
			}
		})
	}
}

func TestWorkerChannelQueueConcurrencyRefusals(t *testing.T) {
	n := newChannelNode(t, openSocketStores(t, "bolt", 1)[0])
	for _, tc := range []struct {
		caps, held map[string]int
		field      string
	}{
		{map[string]int{"q": 1, "x": 1}, nil, "queueConcurrency"}, // not a queue of the hello
		{map[string]int{"q": 1}, nil, "queueConcurrency"},         // p is not capped
		{map[string]int{"q": 2, "p": 2}, nil, "queueConcurrency"}, // more than concurrency together
		{map[string]int{"q": 0, "p": 1}, nil, "queueConcurrency[q]"},
		{map[string]int{"q": 1, "p": 1}, map[string]int{"q": 2}, "held"},
		{nil, map[string]int{"q": 1}, "held"},
	} {
		c, _, err := dialChannel(t, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.send(map[string]any{"type": "hello", "workerId": "w", "queues": []string{"q", "p"}, "concurrency": 3,
			"queueConcurrency": tc.caps, "held": tc.held})
		if f := c.next(); f.Type != "error" || f.Status != http.StatusBadRequest || f.Error.Fields[tc.field] == "" {
			t.Errorf("queueConcurrency %v, held %v answered %+v; want a 400 naming %s", tc.caps, tc.held, f, tc.field)
		}
		if s := c.closedWith(); s != websocket.StatusPolicyViolation {
			t.Errorf("closed with %v; want 1008", s)
		}
	}
}
