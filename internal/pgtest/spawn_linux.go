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
	// A group of its own lets kill end the backends with the postmaster.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: cred, Setpgid: true}
	errc := make(chan error, 1)
	spawnCh <- spawnReq{cmd: cmd, err: errc}
	return <-errc
}

// kill ends the postmaster and every backend at once, as a crash of the
// machine would; a backend left behind would keep the data directory's
// shared memory in use and refuse a restart.
func kill(cmd *exec.Cmd) { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
