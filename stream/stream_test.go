package stream

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/store"
)

func TestHeadersAndFraming(t *testing.T) {
	backendtest.Each(t, backends, func(t *testing.T, b backendtest.Backend) {
		s := b.Open(t)
		srv := newTestServer(t, newTestHandler(t, s, Options{Retry: 1500 * time.Millisecond}))
		c := newContext(t)
		evs := appendN(t, s, c, 2)

		conn := dial(t, streamURL(srv, c), nil)
		h := conn.resp.Header
		for k, want := range map[string]string{
			"Content-Type":      "text/event-stream",
			"Cache-Control":     "no-cache, no-transform",
			"X-Accel-Buffering": "no",
			"Content-Encoding":  "",
		} {
			if got := h.Get(k); got != want {
				t.Errorf("header %s: got %q, want %q", k, got, want)
			}
		}
		first := conn.next(t)
		if first.Retry != "1500" || len(first.Comments) == 0 || first.Data != "" {
			t.Errorf("first message: got %+v, want a comment and retry: 1500", first)
		}
		live := appendN(t, s, c, 1)
		got := conn.readEvents(t, 3)
		for i, ev := range append(evs, live...) {
			if got[i].ID != ev.ID.String() {
				t.Errorf("message %d: id %q, want %q", i, got[i].ID, ev.ID)
			}
			if want := wantFrame(t, ev); got[i].Data != want {
				t.Errorf("message %d data:\n got %s\nwant %s", i, got[i].Data, want)
			}
			var fb frameBody
			if err := json.Unmarshal([]byte(got[i].Data), &fb); err != nil {
				t.Fatal(err)
			}
			var rec event.Event
			if err := json.Unmarshal(fb.Record, &rec); err != nil {
				t.Fatal(err)
			}
			if fb.V != 1 || fb.Event != "log" || rec.ID != ev.ID || rec.Kind != "log" {
				t.Errorf("message %d: got v=%d event=%q record id=%v kind=%q", i, fb.V, fb.Event, rec.ID, rec.Kind)
			}
		}
	})
}

func TestBackfillLimits(t *testing.T) {
	backendtest.Each(t, backends, func(t *testing.T, b backendtest.Backend) {
		s := b.Open(t)
		srv := newTestServer(t, newTestHandler(t, s, Options{MaxBackfill: 5}))
		c := newContext(t)
		evs := appendN(t, s, c, 8)

		t.Run("over the maximum", func(t *testing.T) {
			conn := dial(t, streamURL(srv, c), nil)
			m := conn.nextData(t)
			if m.Event != "truncated" || m.Data != `{"v":1,"limit":5}` {
				t.Fatalf("got %+v, want the truncated notice", m)
			}
			if got, want := msgIDs(conn.readEvents(t, 5)), ids(evs[3:]); !slices.Equal(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
		t.Run("newest N", func(t *testing.T) {
			conn := dial(t, streamURL(srv, c)+"?backfill=3", nil)
			if got, want := msgIDs(conn.readEvents(t, 3)), ids(evs[5:]); !slices.Equal(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
			live := appendN(t, s, c, 1)
			evs = append(evs, live...)
			if got := conn.readEvents(t, 1)[0].ID; got != live[0].ID.String() {
				t.Errorf("live: got %s, want %s", got, live[0].ID)
			}
		})
		t.Run("none", func(t *testing.T) {
			conn := dial(t, streamURL(srv, c)+"?backfill=0", nil)
			live := appendN(t, s, c, 1)
			if got := conn.readEvents(t, 1)[0].ID; got != live[0].ID.String() {
				t.Errorf("got %s, want only the live %s", got, live[0].ID)
			}
		})
	})
}

// TestBackfillPages covers streams longer than one store read.
func TestBackfillPages(t *testing.T) {
	backendtest.Each(t, backends, func(t *testing.T, b backendtest.Backend) {
		s := b.Open(t)
		c := newContext(t)
		evs := make([]event.Event, 0, 2*pageSize+10)
		for len(evs) < 2*pageSize+10 {
			batch := make([]event.Event, 100)
			for i := range batch {
				batch[i] = logEvent(c, len(evs)+i)
			}
			res, err := s.Append(context.Background(), c, batch, store.AppendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			evs = append(evs, res.Events...)
		}
		t.Run("whole stream", func(t *testing.T) {
			srv := newTestServer(t, newTestHandler(t, s, Options{}))
			conn := dial(t, streamURL(srv, c), nil)
			if got, want := msgIDs(conn.readEvents(t, len(evs))), ids(evs); !slices.Equal(got, want) {
				t.Errorf("got %d ids, want %d in order", len(got), len(want))
			}
		})
		t.Run("cut at the maximum", func(t *testing.T) {
			srv := newTestServer(t, newTestHandler(t, s, Options{MaxBackfill: pageSize + 5}))
			conn := dial(t, streamURL(srv, c), nil)
			if m := conn.nextData(t); m.Event != "truncated" {
				t.Fatalf("got %+v, want the truncated notice", m)
			}
			if got, want := msgIDs(conn.readEvents(t, pageSize+5)), ids(evs[len(evs)-pageSize-5:]); !slices.Equal(got, want) {
				t.Errorf("got %d ids, want the newest %d in order", len(got), len(want))
			}
		})
		t.Run("resume", func(t *testing.T) {
			srv := newTestServer(t, newTestHandler(t, s, Options{}))
			conn := dial(t, streamURL(srv, c), http.Header{"Last-Event-Id": {evs[3].ID.String()}})
			if got, want := msgIDs(conn.readEvents(t, len(evs)-4)), ids(evs[4:]); !slices.Equal(got, want) {
				t.Errorf("got %d ids, want %d in order", len(got), len(want))
			}
		})
	})
}

func TestResume(t *testing.T) {
	backendtest.Each(t, backends, func(t *testing.T, b backendtest.Backend) {
		s := b.Open(t)
		srv := newTestServer(t, newTestHandler(t, s, Options{}))
		c := newContext(t)
		evs := appendN(t, s, c, 6)
		u := streamURL(srv, c)
		for name, dialIt := range map[string]func() *sseConn{
			"Last-Event-ID": func() *sseConn { return dial(t, u, http.Header{"Last-Event-Id": {evs[2].ID.String()}}) },
			"lastEventId":   func() *sseConn { return dial(t, u+"?lastEventId="+evs[2].ID.String(), nil) },
			"fromId":        func() *sseConn { return dial(t, u+"?fromId="+evs[2].ID.String(), nil) },
			// A browser's own reconnect sends the header; the URL keeps the
			// first fromId (the v0.3 UI puts it there), which must not win.
			"header over query": func() *sseConn {
				return dial(t, u+"?fromId="+evs[0].ID.String(), http.Header{"Last-Event-Id": {evs[2].ID.String()}})
			},
		} {
			t.Run(name, func(t *testing.T) {
				conn := dialIt()
				if got, want := msgIDs(conn.readEvents(t, 3)), ids(evs[3:]); !slices.Equal(got, want) {
					t.Errorf("got %v, want %v", got, want)
				}
			})
		}
	})
}

func TestResetOnUnknownPosition(t *testing.T) {
	backendtest.Each(t, backends, func(t *testing.T, b backendtest.Backend) {
		s := b.Open(t)
		c := newContext(t)
		evs := appendN(t, s, c, 5)
		last := evs[len(evs)-1].ID
		cases := map[string]string{
			"not an id":  "yesterday",
			"future":     last.Next().Next().String(),
			"before all": before(evs[0].ID).String(),
		}
		for i := range len(evs) - 1 {
			if between := evs[i].ID.Next(); between != evs[i+1].ID {
				cases["between ids"] = between.String()
				break
			}
		}
		for name, from := range cases {
			t.Run(name, func(t *testing.T) {
				var states atomic.Int32
				h := newTestHandler(t, s, Options{State: func(_ context.Context, got store.Context) (json.RawMessage, event.ID, error) {
					states.Add(1)
					if got != c {
						t.Errorf("state of %v, want %v", got, c)
					}
					return json.RawMessage("{\n  \"status\": \"running\"\n}"), evs[3].ID, nil
				}})
				srv := newTestServer(t, h)
				conn := dial(t, streamURL(srv, c), http.Header{"Last-Event-Id": {from}})
				m := conn.nextData(t)
				want := `{"v":1,"position":"` + evs[3].ID.String() + `","state":{"status":"running"}}`
				if m.Event != "reset" || m.ID != evs[3].ID.String() || m.Data != want {
					t.Fatalf("got %+v, want reset at %s with data %s", m, evs[3].ID, want)
				}
				// The state is as of evs[3]: what follows it comes next, then live.
				live := appendN(t, s, c, 1)
				wantIDs := ids(append(slices.Clone(evs[4:]), live...))
				if got := msgIDs(conn.readEvents(t, len(wantIDs))); !slices.Equal(got, wantIDs) {
					t.Errorf("after reset: got %v, want %v", got, wantIDs)
				}
				if states.Load() != 1 {
					t.Errorf("state asked %d times, want once", states.Load())
				}
				evs = append(evs, live...)
			})
		}
		t.Run("no state func", func(t *testing.T) {
			srv := newTestServer(t, newTestHandler(t, s, Options{}))
			conn := dial(t, streamURL(srv, c)+"?lastEventId=nope", nil)
			end := evs[len(evs)-1].ID.String()
			m := conn.nextData(t)
			if m.Event != "reset" || m.ID != end || m.Data != `{"v":1,"position":"`+end+`"}` {
				t.Fatalf("got %+v, want a reset at %s", m, end)
			}
		})
		t.Run("empty stream", func(t *testing.T) {
			srv := newTestServer(t, newTestHandler(t, s, Options{}))
			conn := dial(t, streamURL(srv, newContext(t)), http.Header{"Last-Event-Id": {"5-0"}})
			m := conn.nextData(t)
			if m.Event != "reset" || !m.HasID || m.ID != "" || m.Data != `{"v":1,"position":""}` {
				t.Fatalf("got %+v, want a reset to the beginning", m)
			}
		})
	})
}

func TestHandoffRace(t *testing.T) {
	backendtest.Each(t, backends, func(t *testing.T, b backendtest.Backend) {
		s := b.Open(t)
		c := newContext(t)
		before := appendN(t, s, c, 3)
		var injected []event.Event
		h := newTestHandler(t, s, Options{Hooks: Hooks{AfterSubscribe: func() {
			// Between the live attach and the backfill read: the event is
			// both live and in the backfill, and must arrive once.
			injected = appendN(t, s, c, 1)
		}}})
		srv := newTestServer(t, h)
		conn := dial(t, streamURL(srv, c), nil)
		after := appendN(t, s, c, 2)
		want := ids(slices.Concat(before, injected, after))
		got := msgIDs(conn.readEvents(t, len(want)))
		if !slices.Equal(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
		// Nothing more: a duplicate would come before the heartbeat-free
		// silence ends with the next event.
		last := appendN(t, s, c, 1)
		if got := conn.readEvents(t, 1)[0].ID; got != last[0].ID.String() {
			t.Errorf("after the handoff: got %s, want %s", got, last[0].ID)
		}
	})
}

// TestHeartbeat runs on the bubble's clock: an idle stream gets a comment
// once Heartbeat has passed since it opened, and then every Heartbeat.
func TestHeartbeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = 15 * time.Second
		s := newBoltStore(t)
		srv := newSyncServer(t, newTestHandler(t, s, Options{Heartbeat: every, CheckInterval: -1}))
		conn := syncDial(t, srv, streamURL(srv, newContext(t)), nil)
		opened := time.Now()
		conn.next(t) // the opening comment
		last := opened
		for i := range 3 {
			m := conn.next(t)
			if m.Data != "" || m.Event != "" || !slices.Equal(m.Comments, []string{"ping"}) {
				t.Fatalf("got %+v, want a heartbeat comment", m)
			}
			// The first interval starts when the stream goes live, a
			// step after the request; the next ones are exact.
			if gap := time.Since(last); gap < every || (i > 0 && gap != every) {
				t.Errorf("heartbeat %d came %v after the one before, want %v", i+1, gap, every)
			}
			last = time.Now()
		}
	})
}

func TestRawTail(t *testing.T) {
	backendtest.Each(t, backends, func(t *testing.T, b backendtest.Backend) {
		s := b.Open(t)
		h := newTestHandler(t, s, Options{})
		srv := newTestServer(t, h)
		c := newContext(t)
		old := appendN(t, s, c, 2)
		key := h.o.Prefix + ":" + c.Type + ":" + c.ID
		tail := dial(t, srv.URL+"/api/_events/sse?stream="+url.QueryEscape(key), nil)
		// A client of the context's stream route shares the subscription.
		full := dial(t, streamURL(srv, c), nil)
		full.readEvents(t, 2)
		eventually(t, "both connections attach", func() bool { return topicSubs(h, c) == 2 })

		live := appendN(t, s, c, 2)
		got := tail.readEvents(t, 2)
		for i, ev := range live {
			rec, _ := ev.MarshalJSON()
			want := `{"v":1,"stream":"` + key + `","record":` + string(rec) + `}`
			if got[i].ID != ev.ID.String() || got[i].Data != want {
				t.Errorf("tail message %d: got %+v, want id %s data %s", i, got[i], ev.ID, want)
			}
		}
		if got, want := msgIDs(full.readEvents(t, 2)), ids(live); !slices.Equal(got, want) {
			t.Errorf("stream client: got %v, want %v", got, want)
		}
		t.Run("resume", func(t *testing.T) {
			conn := dial(t, srv.URL+"/api/_events/sse?stream="+url.QueryEscape(key), http.Header{"Last-Event-Id": {old[1].ID.String()}})
			got := conn.readEvents(t, 2)
			if !slices.Equal(msgIDs(got), ids(live)) || !strings.Contains(got[0].Data, `"stream":"`+key+`"`) {
				t.Errorf("got %+v, want the raw-tail form of %v", got, ids(live))
			}
		})
		t.Run("v0.3 global stream", func(t *testing.T) {
			for _, q := range []string{"", "?stream=" + h.o.Prefix + ":events"} {
				conn := dial(t, srv.URL+"/api/_events/sse"+q, nil)
				if m := conn.next(t); m.Retry == "" {
					t.Errorf("%q: got %+v, want the opening comment and retry", q, m)
				}
			}
		})
	})
}

// topicSubs counts the queues attached to c's feed.
func topicSubs(h *Handler, c store.Context) int {
	h.hub.mu.Lock()
	t := h.hub.topics[c]
	h.hub.mu.Unlock()
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.subs)
}

// topicLive reports whether c's feed has settled the position it starts
// after, read by the backfill of the connection that started it: every
// event appended from then on reaches the attached connections live, none
// by that backfill.
func topicLive(h *Handler, c store.Context) bool {
	h.hub.mu.Lock()
	t := h.hub.topics[c]
	h.hub.mu.Unlock()
	if t == nil {
		return false
	}
	select {
	case <-t.ready:
		return true
	default:
		return false
	}
}

func topicCount(h *Handler) int {
	h.hub.mu.Lock()
	defer h.hub.mu.Unlock()
	return len(h.hub.topics)
}

func TestOneSubscriptionPerContext(t *testing.T) {
	s := newBoltStore(t)
	counting := &countingSource{Source: s}
	h := NewHandler(Options{Store: counting, Log: testLogger(t)})
	srv := newTestServer(t, h)
	c, other := newContext(t), newContext(t)
	var conns []*sseConn
	for range 5 {
		conns = append(conns, dial(t, streamURL(srv, c), nil))
	}
	conns = append(conns, dial(t, streamURL(srv, other), nil))
	eventually(t, "six connections attach", func() bool { return topicSubs(h, c) == 5 && topicSubs(h, other) == 1 })
	if got := counting.subscribes.Load(); got != 2 {
		t.Errorf("subscriptions: got %d, want 2 (one per context)", got)
	}
	live := appendN(t, s, c, 1)
	for _, conn := range conns[:5] {
		if got := conn.readEvents(t, 1)[0].ID; got != live[0].ID.String() {
			t.Errorf("got %s, want %s", got, live[0].ID)
		}
	}
	for _, conn := range conns {
		conn.close()
	}
	eventually(t, "the subscriptions end with their connections", func() bool { return topicCount(h) == 0 })
}

type countingSource struct {
	Source
	subscribes atomic.Int32
}

func (s *countingSource) Subscribe(ctx context.Context, c store.Context, buffer int) (store.Subscription, error) {
	s.subscribes.Add(1)
	return s.Source.Subscribe(ctx, c, buffer)
}

// TestDrain runs on the bubble's clock: Drain spreads the closes of open
// streams over DrainWindow, returns once they are all closed, and refuses
// new streams from then on.
func TestDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 5 * time.Second
		s := newBoltStore(t)
		h := newTestHandler(t, s, Options{DrainWindow: window, CheckInterval: -1})
		srv := newSyncServer(t, h)
		c := newContext(t)
		var conns []*sseConn
		for range 4 {
			conn := syncDial(t, srv, streamURL(srv, c), nil)
			conn.next(t)
			conns = append(conns, conn)
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := h.Drain(ctx); err != nil {
			t.Fatalf("drain: %v", err)
		}
		if took := time.Since(start); took > window {
			t.Errorf("drain took %v, want at most the window %v", took, window)
		}
		ends := map[time.Time]bool{}
		for i, conn := range conns {
			for {
				if _, ok := conn.tryNext(t); !ok {
					break
				}
			}
			if err := <-conn.done; err == nil {
				t.Errorf("connection %d: ended without an error", i)
			}
			if conn.ended.Sub(start) > window {
				t.Errorf("connection %d closed %v into the drain, after the window %v", i, conn.ended.Sub(start), window)
			}
			ends[conn.ended] = true
		}
		if len(ends) < 2 {
			t.Errorf("four connections closed at %d instant(s), want them spread over the window", len(ends))
		}
		if _, status := dialWith(t, srv.Client(), time.Minute, streamURL(srv, c), nil); status != http.StatusServiceUnavailable {
			t.Errorf("after drain: got %d, want 503", status)
		}
	})
}

// TestMaxLifetime runs on the bubble's clock: a stream is retired after
// MaxLifetime plus at most its jitter, and the client resumes where it was.
func TestMaxLifetime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lifetime, jitter = time.Hour, 6 * time.Minute
		s := newBoltStore(t)
		srv := newSyncServer(t, newTestHandler(t, s, Options{MaxLifetime: lifetime, LifetimeJitter: jitter, CheckInterval: -1}))
		c := newContext(t)
		evs := appendN(t, s, c, 1)
		opened := time.Now()
		conn := syncDial(t, srv, streamURL(srv, c), nil)
		conn.readEvents(t, 1)
		for {
			if _, ok := conn.tryNext(t); !ok {
				break
			}
		}
		<-conn.done
		if lived := conn.ended.Sub(opened); lived < lifetime || lived > lifetime+jitter {
			t.Errorf("the stream lived %v, want between %v and %v", lived, lifetime, lifetime+jitter)
		}
		// Retired, the client resumes where it was.
		conn = syncDial(t, srv, streamURL(srv, c), http.Header{"Last-Event-Id": {evs[0].ID.String()}})
		live := appendN(t, s, c, 1)
		if got := conn.readEvents(t, 1)[0].ID; got != live[0].ID.String() {
			t.Errorf("got %s, want %s", got, live[0].ID)
		}
	})
}

// TestHTTP2 serves a stream over HTTP/2 (TLS), whose connection cannot be
// taken over: the stream stays in net/http's hands and still gets its
// backfill, then live events.
func TestHTTP2(t *testing.T) {
	s := newBoltStore(t)
	h := newTestHandler(t, s, Options{})
	srv := httptest.NewUnstartedServer(routes(h))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	closeWithTest(t, h, srv)
	c := newContext(t)
	evs := appendN(t, s, c, 2)
	conn, status := dialWith(t, srv.Client(), waitFor, streamURL(srv, c), nil)
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	if conn.resp.ProtoMajor != 2 {
		t.Fatalf("served over %s, want HTTP/2", conn.resp.Proto)
	}
	evs = append(evs, appendN(t, s, c, 1)...)
	if got, want := msgIDs(conn.readEvents(t, 3)), ids(evs); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestHTTP2Drain: a stream that stays in net/http's hands flushes its live
// events as they come and is ended by Drain, as a taken one is.
func TestHTTP2Drain(t *testing.T) {
	s := newBoltStore(t)
	rec := newRecorder()
	h := newTestHandler(t, s, Options{Observer: rec, DrainWindow: time.Millisecond})
	srv := httptest.NewUnstartedServer(routes(h))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	closeWithTest(t, h, srv)
	c := newContext(t)
	conn, status := dialWith(t, srv.Client(), waitFor, streamURL(srv, c), nil)
	if status != http.StatusOK || conn.resp.ProtoMajor != 2 {
		t.Fatalf("status %d over %s, want 200 over HTTP/2", status, conn.resp.Proto)
	}
	eventually(t, "attach, live", func() bool { return topicSubs(h, c) == 1 && topicLive(h, c) })
	for i := range 2 {
		ev := appendN(t, s, c, 1)
		if got := conn.readEvents(t, 1)[0].ID; got != ev[0].ID.String() {
			t.Fatalf("live event %d: got %s, want %s", i, got, ev[0].ID)
		}
	}
	eventually(t, "two live events flushed", func() bool {
		return rec.get(func(r *recorder) int { return r.flushed }) == 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := h.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if n := rec.get(func(r *recorder) int { return r.closed[CloseShutdown] }); n != 1 {
		t.Errorf("shutdown closes %d, want 1 (closes: %v)", n, rec.closed)
	}
	select {
	case <-conn.done:
	case <-time.After(waitFor):
		t.Fatal("the client saw no end of the stream")
	}
}

// TestHTTP10 serves a stream to an HTTP/1.0 client (a proxy's default
// upstream protocol): its response is not chunked, so the stream must not
// be continued as chunks. Every body line is an SSE line, and live events
// follow the backfill.
func TestHTTP10(t *testing.T) {
	s := newBoltStore(t)
	h := newTestHandler(t, s, Options{})
	srv := newTestServer(t, h)
	c := newContext(t)
	evs := appendN(t, s, c, 2)

	u, err := url.Parse(streamURL(srv, c))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(waitFor))
	if _, err := fmt.Fprintf(nc, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", u.Path, u.Host); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || len(resp.TransferEncoding) != 0 {
		t.Fatalf("status %d, transfer encoding %v; want 200, not chunked", resp.StatusCode, resp.TransferEncoding)
	}
	lines := bufio.NewScanner(resp.Body)
	var got []string
	live := false
	for len(got) < 3 && lines.Scan() {
		line := lines.Text()
		switch {
		case line == "" || strings.HasPrefix(line, ":") || strings.HasPrefix(line, "retry:") || strings.HasPrefix(line, "data:") || strings.HasPrefix(line, "event:"):
		case strings.HasPrefix(line, "id:"):
			got = append(got, strings.TrimSpace(strings.TrimPrefix(line, "id:")))
		default:
			t.Fatalf("body line %q is not an SSE line", line)
		}
		if len(got) == 2 && !live {
			live = true
			evs = append(evs, appendN(t, s, c, 1)...)
		}
	}
	if err := lines.Err(); err != nil {
		t.Fatal(err)
	}
	if want := ids(evs); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
