package wiring

import (
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAcceptedConnectionsDropUnackedData: every accepted connection carries
// the listener's TCP_USER_TIMEOUT and no keep-alive probes.
func TestAcceptedConnectionsDropUnackedData(t *testing.T) {
	ln, err := listen(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var timeout, keepAlive int
	var gerr error
	err = rc.Control(func(fd uintptr) {
		timeout, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
		if gerr == nil {
			keepAlive, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE)
		}
	})
	if err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if want := int(unackedTimeout.Milliseconds()); timeout != want {
		t.Errorf("TCP_USER_TIMEOUT %d ms, want %d", timeout, want)
	}
	if keepAlive != 0 {
		t.Errorf("SO_KEEPALIVE %d, want 0", keepAlive)
	}
}
