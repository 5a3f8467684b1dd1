package stream

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// conn is one open stream, as Drain sees it.
type conn struct {
	mu      sync.Mutex
	stopped bool
	onStop  func() // what close calls to end the stream; set by its writer
}

func (c *conn) close() {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return
	}
	c.stopped = true
	f := c.onStop
	c.mu.Unlock()
	if f != nil {
		f()
	}
}

// whenClosed makes close call f, or calls f now when close came first. f
// must not block: Drain calls it from a timer.
func (c *conn) whenClosed(f func()) {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		f()
		return
	}
	c.onStop = f
	c.mu.Unlock()
}

// Drain closes every open stream, each at a random moment of the drain
// window so that clients reconnect elsewhere in a spread rather than a storm,
// and refuses new ones. It returns when all are closed, or with ctx's error
// after closing the rest at once.
func (h *Handler) Drain(ctx context.Context) error {
	h.mu.Lock()
	if !h.draining {
		h.draining = true
		if len(h.conns) == 0 {
			close(h.idle)
		}
	}
	conns := make([]*conn, 0, len(h.conns))
	for c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()

	window := h.o.DrainWindow
	if dl, ok := ctx.Deadline(); ok {
		window = min(window, time.Until(dl)*3/4)
	}
	for _, c := range conns {
		if window <= 0 {
			c.close()
			continue
		}
		time.AfterFunc(rand.N(window), c.close)
	}
	select {
	case <-h.idle:
		return nil
	case <-ctx.Done():
		for _, c := range conns {
			c.close()
		}
		return ctx.Err()
	}
}

// register counts a new stream in, unless the handler drains.
func (h *Handler) register() (*conn, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.draining {
		return nil, false
	}
	c := &conn{}
	h.conns[c] = struct{}{}
	return c, true
}

func (h *Handler) unregister(c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.conns, c)
	if h.draining && len(h.conns) == 0 {
		select {
		case <-h.idle:
		default:
			close(h.idle)
		}
	}
}
