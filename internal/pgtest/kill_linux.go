package pgtest

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// kill ends the postmaster and every backend at once, as a crash of the
// machine would. Backends call setsid, so a signal to the postmaster's
// process group misses them; they are found by their parent instead: the
// postmaster is stopped first so that it forks no more, then its children
// are killed, then it is. A backend left behind could still commit a
// transaction on a connection it holds. kill returns once the backends have
// exited too, so every connection to the server is closed by then, as it is
// once a crashed server is gone.
func kill(cmd *exec.Cmd) {
	pid := cmd.Process.Pid
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	backends := children(pid)
	for _, child := range backends {
		_ = syscall.Kill(child, syscall.SIGKILL)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	deadline := time.Now().Add(startTimeout)
	for _, child := range backends {
		for running(child) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
}

// running reports whether pid is a process that has not exited: neither
// gone nor a zombie, whose sockets the kernel has closed.
func running(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	fields := strings.Fields(string(stat[i+1:]))
	return i >= 0 && len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
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
