//go:build !linux

package pgtest

import (
	"os/exec"
)

func kill(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
