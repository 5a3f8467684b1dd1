package stream

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// watching counts the connections h's poller watches.
func watching(h *Handler) int {
	h.mu.Lock()
	p := h.poll
	h.mu.Unlock()
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.watches)
}

// goroutinesIn counts the goroutines whose stack holds fn.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte(fn)) {
			count++
		}
	}
	return count
}

// rawStream opens a stream of c over a socket of its own and reads its
// response up to the opening comment; rcvbuf > 0 shrinks the socket's
// receive buffer.
func rawStream(t *testing.T, srv *httptest.Server, c store.Context, rcvbuf int) (*net.TCPConn, *bufio.Reader) {
	t.Helper()
	u, err := url.Parse(streamURL(srv, c) + "?backfill=0")
	if err != nil {
		t.Fatal(err)
	}
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		if rcvbuf <= 0 {
			return nil
		}
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
		}); err != nil {
			return err
		}
		return serr
	}}
	nc, err := d.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(waitFor))
	if _, err := fmt.Fprintf(nc, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", u.RequestURI(), u.Host); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the response: %v", err)
		}
		if strings.Contains(line, ": nqd") {
			break
		}
	}
	_ = nc.SetDeadline(time.Time{})
	return nc.(*net.TCPConn), br
}

// TestPollerNoticesIdleClientLeaving: a taken connection is watched by the
// poller, not by a goroutine of its own, and a client that closes, or only
// shuts its side, is noticed at once: nothing is written to it (no event,
// and the heartbeat is an hour away) that could fail first.
func TestPollerNoticesIdleClientLeaving(t *testing.T) {
	for _, how := range []string{"close", "shutdown"} {
		t.Run(how, func(t *testing.T) {
			rec := newRecorder()
			h := newTestHandler(t, newBoltStore(t), Options{Observer: rec, Heartbeat: time.Hour, CheckInterval: -1})
			srv := newTestServer(t, h)
			const n = 5
			var conns []*net.TCPConn
			for range n {
				nc, _ := rawStream(t, srv, newContext(t), 0)
				conns = append(conns, nc)
			}
			eventually(t, "the poller watches every stream", func() bool { return watching(h) == n })
			if g := goroutinesIn("stream.(*taken).read"); g != 0 {
				t.Errorf("%d goroutines block in taken.read, want none: the poller watches", g)
			}
			for _, nc := range conns {
				if how == "close" {
					_ = nc.Close()
				} else {
					_ = nc.CloseWrite()
				}
			}
			eventually(t, "every stream ends as the client's", func() bool {
				return rec.get(func(r *recorder) int { return r.closed[CloseClient] }) == n
			})
			eventually(t, "nothing is left of the streams", func() bool { return openConns(h) == 0 && watching(h) == 0 && topicCount(h) == 0 })
			if got := rec.get(func(r *recorder) int { return r.flushed }); got != 0 {
				t.Errorf("%d events written, want none", got)
			}
		})
	}
}

// TestPollerClientLeavesMidWrite: a client that stops reading while events
// are written to it, then resets the connection, ends its stream once, as
// the client's, whichever notices first: the blocked write or the poller.
func TestPollerClientLeavesMidWrite(t *testing.T) {
	s := newBoltStore(t)
	rec := newRecorder()
	h := newTestHandler(t, s, Options{Observer: rec, WriteTimeout: time.Minute, QueueEvents: 1 << 20, QueueBytes: 1 << 30, CheckInterval: -1})
	srv := newTestServer(t, h)
	c := newContext(t)
	nc, _ := rawStream(t, srv, c, 4096)
	eventually(t, "the poller watches the stream", func() bool { return watching(h) == 1 && topicSubs(h, c) == 1 })
	// More than the socket buffers hold, then until the writer is seen in
	// a write: it is blocked there.
	big := strings.Repeat("x", 64<<10)
	enough := (sendBufferMax(t) + 1<<20) / len(big)
	for i := 0; i < enough || goroutinesIn("stream.(*taken).write") == 0; i++ {
		if i > enough+10_000 {
			t.Fatal("the writes never blocked")
		}
		ev := logEvent(c, i)
		ev.Data = []byte(`{"level":"info","msg":"` + big + `"}`)
		if _, err := s.Append(context.Background(), c, []event.Event{ev}, store.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_ = nc.SetLinger(0) // a reset, as a client that dies
	_ = nc.Close()
	eventually(t, "the stream ends", func() bool { return openConns(h) == 0 && watching(h) == 0 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.closed[CloseClient] != 1 || len(rec.closed) != 1 {
		t.Errorf("closes: got %v, want one, the client's", rec.closed)
	}
}

// TestPollerManyStreams opens and closes many streams at once over a few
// contexts while events are appended: clients leave before, while and after
// their stream is taken over, some reading live events first. Every stream
// ends, and the poller holds nothing after.
func TestPollerManyStreams(t *testing.T) {
	s := newBoltStore(t)
	rec := newRecorder()
	h := newTestHandler(t, s, Options{Observer: rec, CheckInterval: -1})
	srv := newTestServer(t, h)
	ctxs := []store.Context{newContext(t), newContext(t), newContext(t)}
	stop := make(chan struct{})
	var appends sync.WaitGroup
	appends.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if _, err := s.Append(context.Background(), ctxs[i%len(ctxs)], []event.Event{logEvent(ctxs[i%len(ctxs)], i)}, store.AppendOptions{}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	const workers, each = 16, 12
	var opened atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				c := ctxs[(w+i)%len(ctxs)]
				u, _ := url.Parse(streamURL(srv, c))
				nc, err := net.Dial("tcp", u.Host)
				if err != nil {
					t.Error(err)
					return
				}
				_ = nc.SetDeadline(time.Now().Add(waitFor))
				_, _ = fmt.Fprintf(nc, "GET %s?backfill=0 HTTP/1.1\r\nHost: %s\r\n\r\n", u.Path, u.Host)
				br := bufio.NewReader(nc)
				switch i % 4 {
				case 0: // before the response
				case 1: // after the opening comment, often before the takeover
					_, _ = br.ReadString('\n')
				default: // after live events, shutting or closing
					opened.Add(1)
					for data := 0; data < 2; {
						line, err := br.ReadString('\n')
						if err != nil {
							t.Errorf("stream %d/%d: %v", w, i, err)
							break
						}
						if strings.HasPrefix(line, "data:") {
							data++
						}
					}
					if i%4 == 3 {
						_ = nc.(*net.TCPConn).CloseWrite()
						_, _ = br.ReadString('\n')
					}
				}
				_ = nc.Close()
			}
		})
	}
	wg.Wait()
	close(stop)
	appends.Wait()
	eventually(t, "every stream ends and the poller holds nothing", func() bool {
		return openConns(h) == 0 && watching(h) == 0 && topicCount(h) == 0
	})
	// A stream's writes may still be returning from its end.
	eventually(t, "no goroutine left in a taken connection", func() bool { return goroutinesIn("stream.(*taken)") == 0 })
	if o := rec.get(func(r *recorder) int { return r.opened }); o < int(opened.Load()) {
		t.Errorf("%d streams opened, want at least the %d that read events", o, opened.Load())
	}
}

// tcpPair is a connected pair of loopback sockets.
func tcpPair(t *testing.T, ln net.Listener) (server, client *net.TCPConn) {
	t.Helper()
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- nc
	}()
	client0, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server0 := <-accepted
	if server0 == nil {
		t.FailNow()
	}
	t.Cleanup(func() { _ = server0.Close(); _ = client0.Close() })
	return server0.(*net.TCPConn), client0.(*net.TCPConn)
}

func fdOf(t *testing.T, nc *net.TCPConn) int {
	t.Helper()
	rc, err := nc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := rc.Control(func(fd uintptr) { n = int(fd) }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPollerTokensOutliveDescriptors closes a watched socket and watches a
// new one, which the kernel gives the same descriptor number: the old
// watch's late unwatch leaves the new one alone, and the old client's
// leaving is nobody's news.
func TestPollerTokensOutliveDescriptors(t *testing.T) {
	p, err := newPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var gone1, gone2, orphans atomic.Int32
	orphan := func() { orphans.Add(1) }

	s1, c1 := tcpPair(t, ln)
	fd1 := fdOf(t, s1)
	w1, err := p.add(s1, func() { gone1.Add(1) }, orphan)
	if err != nil {
		t.Fatal(err)
	}
	_ = s1.Close() // closed while watched
	// Watch whichever end of a new pair got the closed socket's number.
	s2, c2 := tcpPair(t, ln)
	if fdOf(t, c2) == fd1 {
		s2, c2 = c2, s2
	}
	if fd2 := fdOf(t, s2); fd2 != fd1 {
		t.Logf("descriptor %d not reused (got %d): the test still checks the tokens", fd1, fd2)
	}
	w2, err := p.add(s2, func() { gone2.Add(1) }, orphan)
	if err != nil {
		t.Fatal(err)
	}
	w1.unwatch() // late: must not take the new socket out
	_ = c1.Close()
	if _, err := c2.Write([]byte("ignored")); err != nil {
		t.Fatal(err)
	}
	_ = c2.Close()
	eventually(t, "the second client's leaving is noticed", func() bool { return gone2.Load() == 1 })
	if gone1.Load() != 0 || orphans.Load() != 0 {
		t.Errorf("the first watch was told %d times, orphans %d; want neither", gone1.Load(), orphans.Load())
	}
	w2.unwatch() // after gone: a no-op
	p.mu.Lock()
	left := len(p.watches)
	p.mu.Unlock()
	if left != 0 {
		t.Errorf("%d watches left, want none", left)
	}
}

// TestPollerCloseOrphans: closing the poller hands each connection still
// watched back, without telling it the client left.
func TestPollerCloseOrphans(t *testing.T) {
	p, err := newPoller()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var gone, orphans atomic.Int32
	for range 3 {
		s, _ := tcpPair(t, ln)
		if _, err := p.add(s, func() { gone.Add(1) }, func() { orphans.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	p.close()
	if orphans.Load() != 3 || gone.Load() != 0 {
		t.Errorf("orphans %d, gone %d; want 3 and 0", orphans.Load(), gone.Load())
	}
	s, _ := tcpPair(t, ln)
	if _, err := p.add(s, func() {}, func() {}); err == nil {
		t.Error("a closed poller took a connection")
	}
}
