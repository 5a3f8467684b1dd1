package stream

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
)

// waitFor bounds every wait of these tests: long enough for a loaded
// machine running -race, short enough to fail rather than hang.
const waitFor = 10 * time.Second

// backends are the stores the stream tests run on: each backend, Redis
// Cluster, whose live feed is sharded Pub/Sub, and both with their keys
// split over shards.
var backends = []string{backendtest.Embedded, backendtest.Postgres, backendtest.Redis, backendtest.RedisCluster,
	backendtest.RedisShards, backendtest.RedisClusterShards}

func newBoltStore(t *testing.T) store.Store {
	t.Helper()
	return bolttest.Open(t, boltstore.Options{})
}

func testLogger(t testing.TB) zerolog.Logger {
	return testkit.Logger(t).Level(zerolog.InfoLevel)
}

// newTestServer serves h's routes as nqd mounts them, and extra's.
func newTestServer(t *testing.T, h *Handler, extra ...func(*http.ServeMux)) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(routes(h, extra...))
	closeWithTest(t, h, srv)
	return srv
}

// newSyncServer is newTestServer on in-memory pipes, for a test inside a
// testing/synctest bubble: the handler's timers run on the bubble's clock,
// so hours of heartbeats and lifetimes pass at once, to the nanosecond.
// Open its streams with syncDial.
func newSyncServer(t *testing.T, h *Handler) *httptest.Server {
	t.Helper()
	srv := testkit.PipeServer(t, routes(h))
	closeWithTest(t, h, srv)
	return srv
}

func routes(h *Handler, extra ...func(*http.ServeMux)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/_events/sse", func(w http.ResponseWriter, r *http.Request) {
		req := Request{Tail: true}
		c, quiet, ok := TailStream(r.URL.Query().Get("stream"), h.o.Prefix)
		if !ok {
			http.Error(w, "not a stream of "+h.o.Prefix, http.StatusBadRequest)
			return
		}
		if req.Quiet = quiet; !quiet {
			req.Context = c
		}
		serveTest(h, w, r, req)
	})
	mux.HandleFunc("GET /api/_events/{type}/{id}/stream", func(w http.ResponseWriter, r *http.Request) {
		req := Request{Context: store.Context{Type: r.PathValue("type"), ID: r.PathValue("id")}, Backfill: BackfillMax}
		if s := r.URL.Query().Get("backfill"); s != "" {
			req.Backfill, _ = strconv.Atoi(s)
		}
		serveTest(h, w, r, req)
	})
	for _, f := range extra {
		f(mux)
	}
	return mux
}

// serveTest stands in for the stream routes of package handlers, which
// authorize the request there (their tests cover that part): it reads the
// client's position as they do, and answers a refusal with their status.
func serveTest(h *Handler, w http.ResponseWriter, r *http.Request, req Request) {
	req.Resume, req.From = ResumePosition(r)
	if err := h.Serve(w, r, req); err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, ErrDraining) || errors.Is(err, store.ErrUnavailable) {
			status = http.StatusServiceUnavailable
			w.Header().Set("Retry-After", "5")
		}
		http.Error(w, err.Error(), status)
	}
}

// closeWithTest drains h and closes srv when the test ends.
func closeWithTest(t *testing.T, h *Handler, srv *httptest.Server) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = h.Drain(ctx)
		srv.CloseClientConnections()
		srv.Close()
		h.Close()
	})
}

// newTestHandler builds a handler over s with o's settings and fast checks.
func newTestHandler(t *testing.T, s store.Store, o Options) *Handler {
	t.Helper()
	o.Store = s
	o.Log = testLogger(t)
	if o.CheckInterval == 0 {
		o.CheckInterval = 50 * time.Millisecond
	}
	return NewHandler(o)
}

func streamURL(srv *httptest.Server, c store.Context) string {
	return srv.URL + "/api/_events/" + c.Type + "/" + c.ID + "/stream"
}

var ctxSeq int

// newContext names a flow run no other test of this binary uses.
func newContext(t *testing.T) store.Context {
	t.Helper()
	ctxSeq++
	return store.Context{Type: "flow", ID: fmt.Sprintf("run-%d-%d", time.Now().UnixNano(), ctxSeq)}
}

// appendN appends n log events to c, one append each, and returns them.
func appendN(t testing.TB, s store.Store, c store.Context, n int) []event.Event {
	t.Helper()
	out := make([]event.Event, 0, n)
	for i := range n {
		res, err := s.Append(context.Background(), c, []event.Event{logEvent(c, i)}, store.AppendOptions{})
		if err != nil {
			t.Fatalf("append: %v", err)
		}
		out = append(out, res.Events...)
	}
	return out
}

func logEvent(c store.Context, i int) event.Event {
	return event.Event{
		Kind: "log", Subject: c.ID, RunID: c.ID, FlowName: "demo", Step: "first",
		Data: json.RawMessage(fmt.Sprintf(`{"level":"info","msg":"line %d"}`, i)),
	}
}

func allEvents(t testing.TB, s store.Store, c store.Context) []event.Event {
	t.Helper()
	evs, err := s.Range(context.Background(), c, store.RangeQuery{})
	if err != nil {
		t.Fatalf("range: %v", err)
	}
	return evs
}

// message is one SSE message as a client parses it. Comment-only blocks are
// messages too, so that tests can see heartbeats.
type message struct {
	ID, Event, Data, Retry string
	HasID                  bool
	Comments               []string
}

// sseConn is a raw line reader over one SSE response.
type sseConn struct {
	resp   *http.Response
	cancel context.CancelFunc
	msgs   chan message
	done   chan error    // the read loop's end
	within time.Duration // how long next waits for a message
	ended  time.Time     // when the read loop saw the end; read after done
}

// dial opens an SSE stream; header may be nil. The stream closes with the test.
func dial(t *testing.T, url string, header http.Header) *sseConn {
	t.Helper()
	c, status := tryDial(t, url, header)
	if status != http.StatusOK {
		t.Fatalf("GET %s: status %d", url, status)
	}
	return c
}

// tryDial opens an SSE stream and returns it with the status; a non-200
// response is returned closed, with a nil conn.
func tryDial(t *testing.T, url string, header http.Header) (*sseConn, int) {
	t.Helper()
	return dialWith(t, http.DefaultClient, waitFor, url, header)
}

// syncDial opens a stream of a newSyncServer. Its waits are on the bubble's
// clock, so they allow a day: a stream that never sends fails the test at
// once instead of after a day.
func syncDial(t *testing.T, srv *httptest.Server, url string, header http.Header) *sseConn {
	t.Helper()
	c, status := dialWith(t, srv.Client(), 24*time.Hour, url, header)
	if status != http.StatusOK {
		t.Fatalf("GET %s: status %d", url, status)
	}
	return c
}

func dialWith(t *testing.T, client *http.Client, within time.Duration, url string, header http.Header) (*sseConn, int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		cancel()
		return nil, resp.StatusCode
	}
	c := &sseConn{resp: resp, cancel: cancel, msgs: make(chan message, 64), done: make(chan error, 1), within: within}
	go c.read()
	t.Cleanup(c.close)
	return c, resp.StatusCode
}

func (c *sseConn) close() {
	c.cancel()
	_ = c.resp.Body.Close()
}

func (c *sseConn) read() {
	br := bufio.NewReader(c.resp.Body)
	var m message
	var any bool
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			c.ended = time.Now()
			close(c.msgs)
			c.done <- err
			return
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if any {
				c.msgs <- m
			}
			m, any = message{}, false
			continue
		}
		any = true
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "":
			m.Comments = append(m.Comments, value)
		case "id":
			m.ID, m.HasID = value, true
		case "event":
			m.Event = value
		case "data":
			if m.Data != "" {
				m.Data += "\n"
			}
			m.Data += value
		case "retry":
			m.Retry = value
		}
	}
}

// next returns the next message, failing the test at the end of the stream
// or when none comes within c.within.
func (c *sseConn) next(t *testing.T) message {
	t.Helper()
	m, ok := c.tryNext(t)
	if !ok {
		t.Fatal("the stream ended")
	}
	return m
}

// tryNext is next that reports the end of the stream instead of failing.
func (c *sseConn) tryNext(t *testing.T) (message, bool) {
	t.Helper()
	select {
	case m, ok := <-c.msgs:
		return m, ok
	case <-time.After(c.within):
		t.Fatalf("no message within %v", c.within)
		return message{}, false
	}
}

// nextData skips comment-only messages.
func (c *sseConn) nextData(t *testing.T) message {
	t.Helper()
	for {
		m := c.next(t)
		if m.Data != "" || m.Event != "" {
			return m
		}
	}
}

// frameBody is the data of an SSE message of the stream route.
type frameBody struct {
	V      int             `json:"v"`
	Event  string          `json:"event"`
	Stream string          `json:"stream"`
	Record json.RawMessage `json:"record"`
}

// readEvents reads n data messages and checks each is a well-formed event.
func (c *sseConn) readEvents(t *testing.T, n int) []message {
	t.Helper()
	out := make([]message, 0, n)
	for len(out) < n {
		m := c.nextData(t)
		if m.Event != "" {
			t.Fatalf("got an %q message, want events only", m.Event)
		}
		out = append(out, m)
	}
	return out
}

func ids(evs []event.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID.String()
	}
	return out
}

func msgIDs(ms []message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// wantFrame is the data line an event must arrive as.
func wantFrame(t *testing.T, ev event.Event) string {
	t.Helper()
	b, err := appendEvent(nil, ev)
	if err != nil {
		t.Fatal(err)
	}
	_, data, _ := strings.Cut(strings.TrimSuffix(string(b), "\n\n"), "\ndata: ")
	return data
}

// eventually waits until cond holds, failing after waitFor.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.For(t, waitFor, 2*time.Millisecond, what, cond)
}
