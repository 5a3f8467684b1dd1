package stream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/store"
)

// faultSource wraps a store so that tests can lose live events the way Redis
// Pub/Sub does: one silently, or the whole feed at once.
type faultSource struct {
	Source
	drop       atomic.Int32 // live events still to drop silently
	failSubs   atomic.Bool  // Subscribe fails while set
	subscribes atomic.Int32

	mu   sync.Mutex
	subs []*faultSub
}

func (f *faultSource) Subscribe(ctx context.Context, c store.Context, buffer int) (store.Subscription, error) {
	f.subscribes.Add(1)
	if f.failSubs.Load() {
		return nil, fmt.Errorf("injected: %w", store.ErrUnavailable)
	}
	inner, err := f.Source.Subscribe(ctx, c, buffer)
	if err != nil {
		return nil, err
	}
	s := &faultSub{inner: inner, bound: max(buffer, 1), ready: make(chan struct{}, 1), kill: make(chan struct{})}
	go s.forward(f)
	f.mu.Lock()
	f.subs = append(f.subs, s)
	f.mu.Unlock()
	return s, nil
}

// killAll ends every live subscription with store.ErrLiveLost.
func (f *faultSource) killAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.subs {
		s.once.Do(func() { close(s.kill) })
	}
	f.subs = nil
}

type faultSub struct {
	inner store.Subscription
	bound int
	ready chan struct{}
	kill  chan struct{}
	once  sync.Once
	err   atomic.Value

	mu    sync.Mutex
	queue []event.Event
	ended bool
}

func (s *faultSub) forward(f *faultSource) {
	defer s.end()
	defer s.inner.Close()
	for {
		select {
		case <-s.kill:
			s.err.Store(store.ErrLiveLost)
			return
		case <-s.inner.Ready():
		}
		for {
			ev, ok, live := s.inner.Next()
			if !ok {
				if !live {
					s.err.Store(s.inner.Err())
					return
				}
				break
			}
			if f.drop.Load() > 0 {
				f.drop.Add(-1)
				continue
			}
			s.mu.Lock()
			full := len(s.queue) >= s.bound
			if !full {
				s.queue = append(s.queue, ev)
			}
			s.mu.Unlock()
			if full {
				s.err.Store(store.ErrOverflow)
				return
			}
			s.signal()
		}
	}
}

func (s *faultSub) end() {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
	s.signal()
}

func (s *faultSub) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

func (s *faultSub) Ready() <-chan struct{} { return s.ready }
func (s *faultSub) Next() (event.Event, bool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return event.Event{}, false, !s.ended
	}
	ev := s.queue[0]
	s.queue = s.queue[1:]
	return ev, true, true
}
func (s *faultSub) Err() error {
	if err, ok := s.err.Load().(error); ok {
		return err
	}
	return nil
}
func (s *faultSub) Close() { s.once.Do(func() { close(s.kill) }) }

func TestRepairsSilentlyDroppedEvent(t *testing.T) {
	backendtest.Each(t, backends, func(t *testing.T, b backendtest.Backend) {
		s := b.Open(t)
		f := &faultSource{Source: s}
		h := NewHandler(Options{Store: f, Log: testLogger(t), CheckInterval: 20 * time.Millisecond})
		srv := newTestServer(t, h)
		c := newContext(t)
		conn := dial(t, streamURL(srv, c), nil)
		// Live: an event the backfill read would never be missed.
		eventually(t, "attach, live", func() bool { return topicSubs(h, c) == 1 && topicLive(h, c) })

		f.drop.Store(1)
		lost := appendN(t, s, c, 1)
		// Nothing follows: only the top-of-stream check can find it.
		if got := conn.readEvents(t, 1)[0].ID; got != lost[0].ID.String() {
			t.Fatalf("got %s, want the dropped %s", got, lost[0].ID)
		}
		f.drop.Store(1)
		evs := appendN(t, s, c, 3)
		if got, want := msgIDs(conn.readEvents(t, 3)), ids(evs); !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
		if h.hub.repaired.Load() == 0 {
			t.Error("no repair counted")
		}
	})
}

func TestRepairsLostFeed(t *testing.T) {
	backendtest.Each(t, backends, func(t *testing.T, b backendtest.Backend) {
		s := b.Open(t)
		f := &faultSource{Source: s}
		h := NewHandler(Options{Store: f, Log: testLogger(t), CheckInterval: -1})
		srv := newTestServer(t, h)
		c := newContext(t)
		conn := dial(t, streamURL(srv, c), nil)
		eventually(t, "attach", func() bool { return topicSubs(h, c) == 1 })

		f.failSubs.Store(true)
		f.killAll()
		eventually(t, "the hub notices", func() bool { return h.Ready() != nil })
		missed := appendN(t, s, c, 3)
		f.failSubs.Store(false)
		after := appendN(t, s, c, 2)
		want := ids(append(missed, after...))
		if got := msgIDs(conn.readEvents(t, len(want))); !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
		eventually(t, "ready again", func() bool { return h.Ready() == nil })
		if n := f.subscribes.Load(); n < 3 {
			t.Errorf("subscribes: got %d, want the first, a failed and a successful retry", n)
		}
	})
}

func TestSubscribeFailureIs503(t *testing.T) {
	f := &faultSource{Source: newBoltStore(t)}
	f.failSubs.Store(true)
	srv := newTestServer(t, NewHandler(Options{Store: f, Log: testLogger(t)}))
	resp, err := http.Get(streamURL(srv, newContext(t)))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("got %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// TestSlowClientIsolated stops one client reading: it is disconnected while
// another client of the same context receives everything.
func TestSlowClientIsolated(t *testing.T) {
	backendtest.Each(t, backends, func(t *testing.T, b backendtest.Backend) {
		s := b.Open(t)
		h := newTestHandler(t, s, Options{QueueEvents: 1000, QueueBytes: 4 << 20, WriteTimeout: 2 * time.Second})
		srv := newTestServer(t, h)
		c := newContext(t)

		slow := dialStalled(t, srv.URL, streamURL(srv, c))
		fast := dial(t, streamURL(srv, c), nil)
		eventually(t, "both attach", func() bool { return topicSubs(h, c) == 2 })

		// Far more than socket buffers hold, so the slow client's writes
		// stall and its queue fills.
		big := strings.Repeat("x", 16<<10)
		// The fast client reads each small batch before the next is written:
		// it keeps up however slow this machine is.
		var got, want []string
		for i := range 600 {
			ev := logEvent(c, i)
			ev.Data = []byte(`{"level":"info","msg":"` + big + `"}`)
			res, err := s.Append(context.Background(), c, []event.Event{ev}, store.AppendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, res.Events[0].ID.String())
			if len(want)%8 == 0 {
				got = append(got, msgIDs(fast.readEvents(t, len(want)-len(got)))...)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("fast client: got %d events, want all %d in order", len(got), len(want))
		}
		eventually(t, "the slow client is disconnected", func() bool { return openConns(h) == 1 })
		if n := topicSubs(h, c); n != 1 {
			t.Errorf("attached queues: got %d, want only the fast client's", n)
		}
		_ = slow
	})
}

func openConns(h *Handler) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}

// dialStalled sends a stream request over a connection with a tiny receive
// buffer and never reads the answer.
func dialStalled(t *testing.T, base, target string) net.Conn {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		return errors.Join(err, serr)
	}}
	conn, err := d.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	path := strings.TrimPrefix(target, base)
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", path, u.Host); err != nil {
		t.Fatal(err)
	}
	return conn
}
