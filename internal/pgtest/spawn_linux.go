package pgtest

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
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

// kill ends the postmaster and every backend at once, as a crash of the
// machine would. Backends call setsid, so a signal to the postmaster's
// process group misses them; they are found by their parent instead: the
// postmaster is stopped first so that it forks no more, then its children
// are killed, then it is. A backend left behind could still commit a
// transaction on a connection it holds.
func kill(cmd *exec.Cmd) {
	pid := cmd.Process.Pid
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	for _, child := range children(pid) {
		_ = syscall.Kill(child, syscall.SIGKILL)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// children lists the processes whose parent is pid, from /proc.
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name in parentheses may hold spaces; the state and
		// the parent id follow the last parenthesis.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}
