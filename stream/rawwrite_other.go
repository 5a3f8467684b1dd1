//go:build !linux

package stream

import (
	"net"
	"syscall"
)

// rawConn is nil where writes without blocking are not implemented: every
// write of a taken connection runs on a goroutine of its own.
func rawConn(net.Conn) syscall.RawConn { return nil }

func writeNonblocking(syscall.RawConn, net.Buffers) (net.Buffers, CloseReason) {
	panic("stream: writeNonblocking without a raw connection")
}
