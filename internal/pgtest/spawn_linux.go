package pgtest

import (
	"os/exec"
	"runtime"
	"syscall"
)

type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

var spawnCh = make(chan spawnReq)

// The kernel's parent-death signal fires when the *thread* that forked the
// child exits, so every server is forked from one goroutine locked to a
// thread that lives as long as the test binary. A crashed or interrupted
// test run then leaves no postgres behind: its backends exit when they see
// the postmaster gone.
func init() {
	go func() {
		runtime.LockOSThread()
		for req := range spawnCh {
			req.err <- req.cmd.Start()
		}
	}()
}

func spawn(cmd *exec.Cmd, cred *syscall.Credential) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: cred}
	errc := make(chan error, 1)
	spawnCh <- spawnReq{cmd: cmd, err: errc}
	return <-errc
}
