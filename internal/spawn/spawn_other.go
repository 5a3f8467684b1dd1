//go:build !linux

// Package spawn starts the servers tests run against (redis-server,
// PostgreSQL), and makes the temporary directories that live as long as a
// test binary. A Server (Launch) is one such server on a free port, which a
// test may kill and restart; Unavailable skips a test whose server is not
// installed.
package spawn

import (
	"os/exec"
	"syscall"
)

// Start starts cmd, as cred's user when cred is not nil. Without a
// parent-death signal a server of an interrupted run may outlive it; tests
// that end normally still kill their dedicated servers.
func Start(cmd *exec.Cmd, cred *syscall.Credential) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd.Start()
}
