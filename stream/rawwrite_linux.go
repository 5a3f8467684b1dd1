package stream

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// rawConn is nc's descriptor, for writes without blocking (see
// taken.writeNow): a bare socket's only, as the poller watches.
func rawConn(nc net.Conn) syscall.RawConn {
	if !pollable(nc) {
		return nil
	}
	rc, err := nc.(syscall.Conn).SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// iovMax is the most buffers one writev takes (Linux's IOV_MAX).
const iovMax = 1024

// writeNonblocking writes as much of bufs as the socket takes at once and
// returns what it did not take; CloseClient when the socket failed.
func writeNonblocking(rc syscall.RawConn, bufs net.Buffers) (net.Buffers, CloseReason) {
	var werr error
	err := rc.Write(func(fd uintptr) bool {
		for len(bufs) > 0 {
			n, err := unix.Writev(int(fd), bufs[:min(len(bufs), iovMax)])
			switch err {
			case nil:
				bufs = consume(bufs, n)
			case unix.EINTR:
			case unix.EAGAIN:
				return true // the rest waits for run, which may block
			default:
				werr = err
				return true
			}
		}
		return true
	})
	if err != nil || werr != nil {
		return nil, CloseClient
	}
	return bufs, ""
}

// consume drops the first n bytes of bufs.
func consume(bufs net.Buffers, n int) net.Buffers {
	for len(bufs) > 0 && n >= len(bufs[0]) {
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	if len(bufs) > 0 {
		bufs[0] = bufs[0][n:]
	}
	return bufs
}
