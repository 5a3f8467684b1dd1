package stream

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// poller notices the clients of taken connections leaving, for all of them
// at once: one epoll set holds their sockets, and one goroutine waits on it
// through the runtime's own poller (an epoll descriptor is itself pollable),
// so an idle stream costs no goroutine and no thread of its own.
//
// A socket stays owned by its net.Conn: the poller touches its descriptor
// only inside RawConn.Control, which holds the descriptor open for the call,
// so a descriptor number that a closed connection gave back and a new one
// reuses is never mistaken for the old one. Registrations are keyed by a
// token that is never reused, not by the descriptor number: a readiness
// reported for a connection already unwatched finds no token and is dropped.
type poller struct {
	ep *os.File // the epoll descriptor, pollable by the runtime
	rc syscall.RawConn

	mu      sync.Mutex
	next    uint64
	watches map[uint64]*watch
	closed  bool
	done    chan struct{} // closed when the wait loop has returned
}

// watch is one connection in the poller.
type watch struct {
	p      *poller
	token  uint64
	rc     syscall.RawConn
	gone   func() // the client left; called once, never after unwatch
	orphan func() // the poller closes first: watch some other way
}

// pollEvents are what the poller waits for: input (read and dropped, as a
// blocked read would), the client's half or full close, and errors.
const pollEvents = unix.EPOLLIN | unix.EPOLLRDHUP

// pollBatch is how many readinesses one wait takes.
const pollBatch = 128

func newPoller() (*poller, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("epoll descriptor: %w", err)
	}
	// A non-blocking descriptor joins the runtime's poller: the wait loop
	// parks like any network read instead of holding a thread.
	ep := os.NewFile(uintptr(fd), "stream-poller")
	rc, err := ep.SyscallConn()
	if err != nil {
		_ = ep.Close()
		return nil, err
	}
	p := &poller{ep: ep, rc: rc, watches: map[uint64]*watch{}, done: make(chan struct{})}
	go p.loop()
	return p, nil
}

// pollable reports whether the poller can watch nc: a bare socket. A
// wrapper's (TLS's) reads and its socket's bytes differ, and an in-memory
// connection has no descriptor; those are watched by a goroutine.
func pollable(nc net.Conn) bool {
	switch nc.(type) {
	case *net.TCPConn, *net.UnixConn:
		return true
	}
	return false
}

// add watches nc, which must be pollable, until unwatch: gone is called
// once if the client leaves first, orphan instead if the poller closes
// first. Both are called on the poller's goroutine and must not block.
func (p *poller) add(nc net.Conn, gone, orphan func()) (*watch, error) {
	rc, err := nc.(syscall.Conn).SyscallConn()
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, net.ErrClosed
	}
	p.next++
	w := &watch{p: p, token: p.next, rc: rc, gone: gone, orphan: orphan}
	p.watches[w.token] = w
	p.mu.Unlock()
	ev := unix.EpollEvent{Events: pollEvents}
	ev.Fd, ev.Pad = int32(uint32(w.token)), int32(uint32(w.token>>32))
	if err := p.ctl(rc, unix.EPOLL_CTL_ADD, &ev); err != nil {
		p.forget(w)
		return nil, err
	}
	return w, nil
}

// forget drops w's token and reports whether it was still registered.
func (p *poller) forget(w *watch) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watches[w.token] != w {
		return false
	}
	delete(p.watches, w.token)
	return true
}

// unwatch stops watching; after it returns, gone is not called. Call it
// before closing the connection.
func (w *watch) unwatch() {
	if !w.p.forget(w) {
		return
	}
	w.del()
}

// del takes the socket out of the epoll set, unless the connection is
// closed already (which takes it out by itself).
func (w *watch) del() {
	_ = w.p.ctl(w.rc, unix.EPOLL_CTL_DEL, nil)
}

// ctl changes a socket's registration. Both descriptors are held open for
// the call (os.File.Fd would make the epoll descriptor blocking).
func (p *poller) ctl(conn syscall.RawConn, op int, ev *unix.EpollEvent) error {
	var cerr error
	err := p.rc.Control(func(epfd uintptr) {
		err := conn.Control(func(fd uintptr) {
			cerr = unix.EpollCtl(int(epfd), op, int(fd), ev)
		})
		cerr = errors.Join(err, cerr)
	})
	return errors.Join(err, cerr)
}

// loop waits for readinesses until the poller closes.
func (p *poller) loop() {
	defer close(p.done)
	evs := make([]unix.EpollEvent, pollBatch)
	buf := make([]byte, 512)
	// One wait function for every wake-up: a closure made in the loop was
	// an allocation per wake-up.
	var n int
	var werr error
	wait := func(fd uintptr) bool {
		n, werr = unix.EpollWait(int(fd), evs, 0)
		if werr == unix.EINTR {
			n, werr = 0, nil
		}
		return n > 0 || werr != nil
	}
	for {
		err := p.rc.Read(wait)
		if err != nil || werr != nil {
			// Closed (the normal end), or epoll itself broke: either way,
			// each connection still watched is handed back.
			p.orphanAll()
			_ = p.ep.Close()
			return
		}
		for _, ev := range evs[:n] {
			p.ready(uint64(uint32(ev.Fd))|uint64(uint32(ev.Pad))<<32, ev.Events, buf)
		}
	}
}

// ready handles one readiness: a hang-up or error ends the watch, input is
// read and dropped, and end of input ends the watch too.
func (p *poller) ready(token uint64, events uint32, buf []byte) {
	p.mu.Lock()
	w := p.watches[token]
	p.mu.Unlock()
	if w == nil {
		return // unwatched since the wait returned
	}
	left := events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0
	if !left {
		// Level-triggered: what is not read now is reported again.
		var n int
		var rerr error
		if err := w.rc.Control(func(fd uintptr) { n, rerr = unix.Read(int(fd), buf) }); err != nil {
			left = true
		} else if rerr != unix.EAGAIN && (rerr != nil || n == 0) {
			left = true
		}
	}
	if left && p.forget(w) {
		w.del()
		w.gone()
	}
}

// orphanAll hands every connection still watched back to its owner.
func (p *poller) orphanAll() {
	p.mu.Lock()
	p.closed = true
	ws := make([]*watch, 0, len(p.watches))
	for _, w := range p.watches {
		ws = append(ws, w)
	}
	clear(p.watches)
	p.mu.Unlock()
	for _, w := range ws {
		w.orphan()
	}
}

// close stops the poller; connections still watched get their orphan call.
func (p *poller) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ep.Close()
	<-p.done
}
