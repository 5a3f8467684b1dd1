package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// recorder is an Observer that remembers what it was told.
type recorder struct {
	mu       sync.Mutex
	opened   int
	closed   map[CloseReason]int
	started  map[StartKind]int
	replayed int // events of all Started calls
	received int
	flushed  int
	bytes    int
	repaired int
	resubs   int
}

func newRecorder() *recorder {
	return &recorder{closed: map[CloseReason]int{}, started: map[StartKind]int{}}
}

func (r *recorder) Opened(store.Context) { r.mu.Lock(); r.opened++; r.mu.Unlock() }
func (r *recorder) Closed(_ store.Context, why CloseReason) {
	r.mu.Lock()
	r.closed[why]++
	r.mu.Unlock()
}
func (r *recorder) Started(k StartKind, n int, _ time.Duration) {
	r.mu.Lock()
	r.started[k]++
	r.replayed += n
	r.mu.Unlock()
}
func (r *recorder) Received(event.ID)            { r.mu.Lock(); r.received++; r.mu.Unlock() }
func (r *recorder) Broadcast(int, time.Duration) {}
func (r *recorder) Flushed(n, size int, _ event.ID) {
	r.mu.Lock()
	r.flushed += n
	r.bytes += size
	r.mu.Unlock()
}
func (r *recorder) Repaired(n int) { r.mu.Lock(); r.repaired += n; r.mu.Unlock() }
func (r *recorder) Resubscribed()  { r.mu.Lock(); r.resubs++; r.mu.Unlock() }

func (r *recorder) get(f func(*recorder) int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return f(r)
}

func TestObserver(t *testing.T) {
	s := newBoltStore(t)
	rec := newRecorder()
	h := newTestHandler(t, s, Options{Observer: rec, MaxLifetime: time.Hour})
	srv := newTestServer(t, h)
	c := newContext(t)
	evs := appendN(t, s, c, 3)

	fresh := dial(t, streamURL(srv, c), nil)
	fresh.readEvents(t, 3)
	exact := dial(t, streamURL(srv, c), http.Header{"Last-Event-Id": {evs[0].ID.String()}})
	exact.readEvents(t, 2)
	unknown := dial(t, streamURL(srv, c), http.Header{"Last-Event-Id": {"nope"}})
	if m := unknown.nextData(t); m.Event != "reset" {
		t.Fatalf("got %+v, want a reset", m)
	}
	live := appendN(t, s, c, 2)
	for _, conn := range []*sseConn{fresh, exact, unknown} {
		conn.readEvents(t, len(live))
	}
	eventually(t, "three connections flushed two live events each", func() bool {
		return rec.get(func(r *recorder) int { return r.flushed }) == 6
	})
	if n := rec.get(func(r *recorder) int { return r.opened }); n != 3 {
		t.Errorf("opened %d, want 3", n)
	}
	rec.mu.Lock()
	if rec.started[StartFresh] != 1 || rec.started[StartExact] != 1 || rec.started[StartUnknown] != 1 {
		t.Errorf("started %v, want one fresh, one exact, one unknown_id", rec.started)
	}
	if rec.replayed != 5 {
		t.Errorf("replayed %d events, want 3 of the backfill and 2 of the resume", rec.replayed)
	}
	if rec.received != 2 {
		t.Errorf("received %d live events, want 2", rec.received)
	}
	if rec.bytes == 0 {
		t.Error("flushed no bytes")
	}
	rec.mu.Unlock()

	fresh.close()
	eventually(t, "a client close", func() bool {
		return rec.get(func(r *recorder) int { return r.closed[CloseClient] }) == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := h.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	eventually(t, "two shutdown closes", func() bool {
		return rec.get(func(r *recorder) int { return r.closed[CloseShutdown] }) == 2
	})
}

func TestObserverSlowAndRotate(t *testing.T) {
	t.Run("rotate", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newBoltStore(t)
			rec := newRecorder()
			srv := newSyncServer(t, newTestHandler(t, s, Options{Observer: rec, MaxLifetime: time.Hour, CheckInterval: -1}))
			conn := syncDial(t, srv, streamURL(srv, newContext(t)), nil)
			for {
				if _, ok := conn.tryNext(t); !ok {
					break
				}
			}
			// The server observes the close before the client sees the
			// end, or right after: once everything is blocked it is done.
			synctest.Wait()
			if n := rec.get(func(r *recorder) int { return r.closed[CloseRotate] }); n != 1 {
				t.Errorf("rotate closes %d, want 1", n)
			}
		})
	})
	t.Run("slow", func(t *testing.T) {
		s := newBoltStore(t)
		rec := newRecorder()
		srv := newTestServer(t, newTestHandler(t, s, Options{Observer: rec, WriteTimeout: 50 * time.Millisecond}))
		c := newContext(t)
		// A client that sends its request and then never reads: the
		// socket's buffers fill, and the next write outlives its deadline.
		nc, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nc.Close() })
		if _, err := fmt.Fprintf(nc, "GET /api/_events/%s/%s/stream HTTP/1.1\r\nHost: nqd\r\n\r\n", c.Type, c.ID); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the stream opened", func() bool { return rec.get(func(r *recorder) int { return r.opened }) == 1 })
		big := event.Event{Kind: "log", Data: json.RawMessage(`"` + strings.Repeat("x", 64<<10) + `"`)}
		// Append until the stream's buffers are full and a write times out.
		eventually(t, "a slow close", func() bool {
			if rec.get(func(r *recorder) int { return r.closed[CloseSlow] }) > 0 {
				return true
			}
			if _, err := s.Append(context.Background(), c, []event.Event{big}, store.AppendOptions{}); err != nil {
				t.Fatal(err)
			}
			return false
		})
	})
}
