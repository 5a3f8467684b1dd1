// Package spawn starts the servers tests run against (redis-server,
// PostgreSQL) so that they do not outlive the test binary, and makes the
// temporary directories that live as long as a test binary. A Server
// (Launch) is one such server on a free port, which a test may kill and
// restart; Unavailable skips a test whose server is not installed.
package spawn

import (
	"os/exec"
	"runtime"
	"syscall"
)

type request struct {
	cmd *exec.Cmd
	err chan error
}

var requests = make(chan request)

// The kernel's parent-death signal fires when the *thread* that forked the
// child exits, so every server is forked from one goroutine locked to a
// thread that lives as long as the test binary. A crashed or interrupted
// test run then leaves no server behind.
func init() {
	go func() {
		runtime.LockOSThread()
		for req := range requests {
			req.err <- req.cmd.Start()
		}
	}()
}

// Start starts cmd, as cred's user when cred is not nil, so that it is
// killed when the test binary exits.
func Start(cmd *exec.Cmd, cred *syscall.Credential) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: cred}
	errc := make(chan error, 1)
	requests <- request{cmd: cmd, err: errc}
	return <-errc
}
