//go:build !linux

package redistest

import "os/exec"

// Without a parent-death signal a server of an interrupted run may outlive
// it; tests that end normally still kill their dedicated servers.
func spawn(cmd *exec.Cmd) error { return cmd.Start() }
