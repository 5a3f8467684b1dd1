//go:build linux || darwin

package pgstore

import (
	"errors"
	"net"
	"syscall"
)

// peerClosed reports, without blocking or consuming anything, whether c has
// something to read while idle: the end of the stream of a server that went
// away, or the message of one shutting down. Either way the connection is
// pinged before use.
func peerClosed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	pending := false
	// Control, not Read: pgx may have a background read of its own blocked
	// on the socket, holding the read side.
	err = rc.Control(func(fd uintptr) {
		var b [1]byte
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Nothing to read is an idle connection, as it should be; data, the
		// end of the stream (0 bytes) or an error is not.
		pending = !errors.Is(rerr, syscall.EAGAIN) && !errors.Is(rerr, syscall.EWOULDBLOCK) && !errors.Is(rerr, syscall.EINTR)
	})
	return err != nil || pending
}
