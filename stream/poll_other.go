//go:build !linux

package stream

import (
	"errors"
	"net"
)

// Elsewhere than on Linux, every taken connection is watched by a goroutine
// of its own (taken.read); see poll_linux.go.

type poller struct{}

type watch struct{}

func newPoller() (*poller, error) { return nil, errors.ErrUnsupported }

func pollable(net.Conn) bool { return false }

func (*poller) add(net.Conn, func(), func()) (*watch, error) { return nil, errors.ErrUnsupported }

func (*poller) close() {}

func (*watch) unwatch() {}
