package testkit

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// PipeListener is a net.Listener whose connections are in-memory pipes. A
// server and its clients on it can run inside a testing/synctest bubble,
// where a real socket would keep the fake clock from advancing.
type PipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	close sync.Once
	port  atomic.Int32
}

// NewPipeListener returns a listener with no connection yet.
func NewPipeListener() *PipeListener {
	return &PipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept waits for the next DialContext.
func (l *PipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and DialContext; connections already made stay open.
func (l *PipeListener) Close() error {
	l.close.Do(func() { close(l.done) })
	return nil
}

// Addr is a loopback address, so that URLs built from it look ordinary.
func (l *PipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }

// DialContext connects to the listener, whatever the address; it fits
// http.Transport.DialContext.
func (l *PipeListener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	server, client := net.Pipe()
	// Each client gets a port of its own, so that servers that tell
	// clients apart by address (rate limits, stream caps) see distinct
	// peers as they would on a socket.
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000 + int(l.port.Add(1))}
	select {
	case l.conns <- addrConn{Conn: server, local: l.Addr(), remote: remote}:
		return addrConn{Conn: client, local: remote, remote: l.Addr()}, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// addrConn is a pipe end with socket-like addresses: a pipe's own are
// "pipe", which no server can split into host and port.
type addrConn struct {
	net.Conn
	local, remote net.Addr
}

func (c addrConn) LocalAddr() net.Addr  { return c.local }
func (c addrConn) RemoteAddr() net.Addr { return c.remote }

// PipeServer serves h over a PipeListener until the test ends: its URL and
// Client are used as those of any httptest.Server, and it runs inside a
// testing/synctest bubble. Requests must go through its Client.
func PipeServer(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	ln := NewPipeListener()
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	srv.Start()
	srv.Client().Transport.(*http.Transport).DialContext = ln.DialContext
	t.Cleanup(srv.Close)
	return srv
}
