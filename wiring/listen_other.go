//go:build !linux

package wiring

import "syscall"

// setUnackedTimeout does nothing where TCP_USER_TIMEOUT is not portable:
// such a connection is dropped at the kernel's retransmission limit.
func setUnackedTimeout(string, string, syscall.RawConn) error { return nil }
