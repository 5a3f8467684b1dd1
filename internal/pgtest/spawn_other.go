//go:build !linux

package pgtest

import (
	"os/exec"
	"syscall"
)

// Without a parent-death signal a server of an interrupted run may outlive
// it; tests that end normally still kill their dedicated servers.
func spawn(cmd *exec.Cmd, cred *syscall.Credential) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd.Start()
}

func kill(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
