//go:build !(linux || darwin)

package pgstore

import "net"

// peerClosed cannot peek at a socket here; the pool's idle rule alone
// decides when a connection is pinged.
func peerClosed(net.Conn) bool { return false }
