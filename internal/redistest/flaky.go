package redistest

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
)

// Faults a Flaky network injects into the next script call (EVALSHA or
// EVAL) that goes through it.
const (
	LoseReply          = iota + 1 // the call reaches Redis, its reply is lost
	LoseCall                      // the call is lost on the way, then the connection
	LoseReplyAndGoDown            // the call reaches Redis, then Redis becomes unreachable
)

// Flaky is the network between a client and Redis, breaking where a test
// asks: one script call at a time, or every connection while down. Use Dial
// as the client's redis.Options.Dialer.
type Flaky struct {
	mu    sync.Mutex
	fault int
	down  bool
	calls atomic.Int64
}

// Arm makes the next script call meet fault.
func (f *Flaky) Arm(fault int) { f.mu.Lock(); f.fault = fault; f.mu.Unlock() }

// SetDown makes Redis unreachable (true) or reachable again.
func (f *Flaky) SetDown(down bool) { f.mu.Lock(); f.down = down; f.mu.Unlock() }

// Calls counts the script calls that reached Redis; ResetCalls zeroes it.
func (f *Flaky) Calls() int64 { return f.calls.Load() }

// ResetCalls zeroes Calls.
func (f *Flaky) ResetCalls() { f.calls.Store(0) }

func (f *Flaky) isDown() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.down
}

func (f *Flaky) take() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	fault := f.fault
	f.fault = 0
	return fault
}

// Dial connects to addr unless the network is down.
func (f *Flaky) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if f.isDown() {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &flakyConn{Conn: c, net: f}, nil
}

type flakyConn struct {
	net.Conn
	net    *Flaky
	broken atomic.Bool
}

func (c *flakyConn) Write(p []byte) (int, error) {
	if c.net.isDown() {
		// go-redis finds a pooled connection to a server that went away
		// dead before it sends on it, and dials anew: which fails.
		return 0, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	if !bytes.Contains(bytes.ToLower(p), []byte("eval")) {
		return c.Conn.Write(p)
	}
	switch c.net.take() {
	case LoseCall:
		c.broken.Store(true)
		return len(p), nil
	case LoseReply:
		c.broken.Store(true)
	case LoseReplyAndGoDown:
		c.broken.Store(true)
		c.net.SetDown(true)
	}
	c.net.calls.Add(1)
	return c.Conn.Write(p)
}

func (c *flakyConn) Read(p []byte) (int, error) {
	if c.broken.Load() {
		_ = c.Conn.Close()
		return 0, io.EOF
	}
	return c.Conn.Read(p)
}
