package stream

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// An idle stream should cost little more than its socket. net/http would
// hold two goroutines for it (the handler's, deep in middleware, and a
// background reader) and a read and a write buffer, about 40 KB in all. So
// once the backfill is written, an HTTP/1.1 stream's connection is taken
// over (hijacked) and served by a taken: timers, and a watch that notices
// the client leaving at once. On Linux the handler's poller (poll_linux.go)
// watches every taken socket with one epoll set and one goroutine; where it
// cannot (another system, a connection that is not a bare socket), a
// goroutine per connection blocks on a one-byte read instead. Writes run
// on a goroutine started when there is something to write (events queued
// by the hub, a heartbeat due, the end) that exits when done, under the
// same write deadline as before. HTTP/2 streams, which cannot be taken
// over, keep the loop in live.go.

// taken is a stream on a connection taken over from net/http. The response
// it continues is chunked (its headers are written), so it frames each write
// as a chunk and ends with the last chunk.
type taken struct {
	h    *Handler
	nc   net.Conn
	q    *queue
	c    store.Context
	tail bool
	// reqID and client name the request in the log; a request's logger
	// would hold half a kilobyte per stream for the one line a stream may
	// write.
	reqID, client string
	end           *ending
	last          event.ID // the newest event written
	w             *watch   // the poller's watch; nil when read watches instead

	hb, retire, expire *time.Timer

	mu      sync.Mutex
	running bool        // a goroutine runs the writes
	again   bool        // run once more: something happened since
	beat    bool        // a heartbeat is due
	reason  CloseReason // set once: the stream ends for this reason
}

// lastChunk ends a chunked response.
const lastChunk = "0\r\n\r\n"

// ping is the heartbeat, a comment line.
const ping = ": ping\n\n"

// pingChunk and crlf are shared by every write: net.Buffers only
// reslices its entries, never writes into them.
var pingChunk, crlf = []byte(ping), []byte("\r\n")

// takeOver hands the stream to a taken connection and reports whether it
// did; it does not when the connection cannot be taken over (HTTP/2), nor when the queue has lost frames that only
// the stream can supply (the loop in live.go reads them). Whatever the
// backfill wrote is flushed first: net/http drops what it still buffers.
func (h *Handler) takeOver(s *sink, req Request, cn *conn, q *queue, p plan, last event.ID, end *ending) bool {
	c, expiry := req.Context, req.Expiry
	if q.holes() || s.flush() != nil {
		return false
	}
	nc, _, err := s.rc.Hijack()
	if err != nil {
		return false
	}
	// Until the setup is done, whatever fires (a timer, the hub, the
	// client leaving) only marks the writes to run: they start at the end.
	t := &taken{h: h, nc: nc, q: q, c: c, tail: p.tail, reqID: req.RequestID, client: req.Client, end: end, last: last, running: true}
	_ = nc.SetDeadline(time.Time{})
	if t.w = h.watch(nc, func() { t.stop(CloseClient, true) }, func() { go t.read() }); t.w == nil {
		go t.read()
	}
	q.onFail(func() { _ = nc.SetWriteDeadline(time.Now()) })
	t.hb = time.AfterFunc(h.o.Heartbeat, func() {
		t.mu.Lock()
		t.beat = true
		t.mu.Unlock()
		t.kick(false)
	})
	if h.o.MaxLifetime > 0 {
		t.retire = time.AfterFunc(h.o.MaxLifetime+rand.N(h.o.LifetimeJitter+1), func() { t.stop(CloseRotate, false) })
	}
	if !expiry.IsZero() {
		t.expire = time.AfterFunc(time.Until(expiry), func() { t.stop(CloseExpired, false) })
	}
	cn.whenClosed(func() { t.stop(CloseShutdown, true) })
	q.onSignal(func() { t.kick(true) })
	t.mu.Lock()
	t.running = false
	t.mu.Unlock()
	t.kick(true)
	return true
}

// watch has the handler's poller watch nc, made at the first call; nil
// when it cannot.
func (h *Handler) watch(nc net.Conn, gone, orphan func()) *watch {
	if !pollable(nc) {
		return nil
	}
	h.mu.Lock()
	if h.poll == nil && !h.noPoll {
		p, err := newPoller()
		if err != nil {
			h.noPoll = true
			h.o.Log.Warn().Err(err).Msg("taken connections are watched by a goroutine each")
		}
		h.poll = p
	}
	p := h.poll
	h.mu.Unlock()
	if p == nil {
		return nil
	}
	w, err := p.add(nc, gone, orphan)
	if err != nil {
		return nil
	}
	return w
}

// read waits for the client to close the connection; whatever it sends
// meanwhile is ignored. It watches a connection the poller does not.
func (t *taken) read() {
	b := make([]byte, 1)
	for {
		if _, err := t.nc.Read(b); err != nil {
			t.stop(CloseClient, false)
			return
		}
	}
}

// stop ends the stream for reason, unless it ends for another already.
func (t *taken) stop(reason CloseReason, spawn bool) {
	t.mu.Lock()
	if t.reason == "" {
		t.reason = reason
	}
	t.mu.Unlock()
	t.kick(spawn)
}

// kick makes sure the writes run after this call: on a new goroutine when
// spawn (the hub must never wait on a client), else on the caller's. When
// they run already, they run once more.
func (t *taken) kick(spawn bool) {
	t.mu.Lock()
	t.again = true
	if t.running {
		t.mu.Unlock()
		return
	}
	t.running = true
	t.mu.Unlock()
	if spawn {
		go t.run()
	} else {
		t.run()
	}
}

// run writes until nothing is left to do, or ends the stream. After the
// end, running stays set: nothing runs again.
func (t *taken) run() {
	for {
		t.mu.Lock()
		if !t.again {
			t.running = false
			t.mu.Unlock()
			return
		}
		beat, reason := t.beat, t.reason
		t.again, t.beat = false, false
		t.mu.Unlock()
		if reason == "" {
			reason = t.write(beat)
		}
		if reason != "" {
			t.finish(reason)
			return
		}
	}
}

// write sends the queued events, or a heartbeat when beat and there are
// none, as one chunk. It returns why the stream must end, or "".
func (t *taken) write(beat bool) CloseReason {
	frames, _, failed := t.q.take(nil)
	if failed {
		t.h.o.Log.Info().Str("req_id", t.reqID).Str("client", t.client).Str("context", t.c.String()).
			Str("last_id", t.last.String()).Msg("client too slow; disconnecting")
		return CloseSlow
	}
	// The first buffer is left for the chunk's size line.
	b := batch{bufs: make(net.Buffers, 1, len(frames)+2)}
	b.add(frames, t.tail, &t.last)
	bufs, size := b.bufs, b.size
	switch {
	case b.n == 0 && !beat:
		return ""
	case b.n == 0:
		bufs = append(bufs, pingChunk)
		size = len(ping)
	}
	bufs[0] = append(strconv.AppendInt(make([]byte, 0, 10), int64(size), 16), '\r', '\n')
	bufs = append(bufs, crlf)
	_ = t.nc.SetWriteDeadline(time.Now().Add(t.h.o.WriteTimeout))
	if _, err := bufs.WriteTo(t.nc); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return CloseSlow
		}
		return CloseClient
	}
	t.hb.Reset(t.h.o.Heartbeat)
	b.flushed(t.h.o.Observer)
	return ""
}

// finish ends the response when the server ends the stream, closes the
// connection and gives back what the stream held.
func (t *taken) finish(reason CloseReason) {
	for _, tm := range []*time.Timer{t.hb, t.retire, t.expire} {
		if tm != nil {
			tm.Stop()
		}
	}
	if t.w != nil {
		// Before the close: the descriptor must still be this socket's.
		t.w.unwatch()
	}
	if reason != CloseSlow && reason != CloseClient {
		_ = t.nc.SetWriteDeadline(time.Now().Add(t.h.o.WriteTimeout))
		_, _ = t.nc.Write([]byte(lastChunk))
	}
	_ = t.nc.Close()
	t.end.reason = reason
	t.end.run()
}
