package wiring

import (
	"context"
	"net"
	"time"
)

// unackedTimeout is how long data the server sent may stay unacknowledged
// before the kernel drops the connection: an event stream writes at least a
// heartbeat every NQ_SSE_HEARTBEAT, so a client that vanished without
// closing (a laptop closed, a network gone) is let go about this long after,
// not after the kernel's retransmission limit of up to a quarter of an hour.
const unackedTimeout = time.Minute

// listen binds addr for the API. Accepted connections inherit the listening
// socket's unackedTimeout (TCP_USER_TIMEOUT on Linux) and set no TCP
// keep-alive probes: an idle connection is closed after NQ_IDLE_TIMEOUT, an
// event stream is never idle long enough for a probe (its heartbeat keeps
// data in flight, and the kernel sends no probe while data is unacknowledged)
// and a long poll ends on its own, so probes would find nothing; setting them
// up cost four system calls on every accepted connection.
func listen(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1, Control: setUnackedTimeout}
	return lc.Listen(ctx, "tcp", addr)
}
