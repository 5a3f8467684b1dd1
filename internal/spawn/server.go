package spawn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Config says how to run one kind of server on a port of 127.0.0.1.
type Config struct {
	// Name names the server in errors ("redis-server", "postgres").
	Name string
	// Dir is the server's directory; its output goes to Dir/Log.
	Dir string
	Log string
	// Command is the server in the foreground on port, so that it is this
	// process's child.
	Command func(port int) *exec.Cmd
	// Cred is whom to run it as, nil for this process's user.
	Cred *syscall.Credential
	// Ready answers nil once the server on port serves.
	Ready func(ctx context.Context, port int) error
	// Timeout bounds how long a fresh server may take to be Ready.
	Timeout time.Duration
	// Kill ends the process at once, as a crash would, and returns once it
	// has let go of its port; nil kills the process alone.
	Kill func(cmd *exec.Cmd)
}

// Server is a server process that a test may kill, as a crash would, and
// start again on the same port with the same directory.
type Server struct {
	Port int
	cfg  Config

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Launch starts the server on a free port and waits until it is Ready.
func Launch(cfg Config) (*Server, error) {
	var lastErr error
	// A free port found by listening may be taken by someone else before
	// the server binds it; a few attempts make that race harmless.
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Port: port, cfg: cfg}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// Kill ends the server at once and waits for it to exit. Killing a stopped
// server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	if s.cfg.Kill != nil {
		s.cfg.Kill(s.cmd)
	} else {
		_ = s.cmd.Process.Kill()
	}
	<-s.done
	s.cmd = nil
}

// Restart kills the server if it runs and starts it again on the same port
// with the same directory.
func (s *Server) Restart() error {
	s.Kill()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.start()
}

// Signal sends sig to the server's process, or fails when it is stopped.
func (s *Server) Signal(sig os.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("%s on port %d is not running", s.cfg.Name, s.Port)
	}
	return s.cmd.Process.Signal(sig)
}

// PID is the server's process id, or 0 when it is stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// start runs the server and waits until it is Ready; s.mu is held or s is
// not shared yet.
func (s *Server) start() error {
	log := filepath.Join(s.cfg.Dir, s.cfg.Log)
	logf, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = logf.Close() }()
	cmd := s.cfg.Command(s.Port)
	cmd.Dir = s.cfg.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := Start(cmd, s.cfg.Cred); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	deadline := time.Now().Add(s.cfg.Timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		readyErr := s.cfg.Ready(ctx, s.Port)
		cancel()
		if readyErr == nil {
			s.cmd, s.done = cmd, done
			return nil
		}
		if time.Now().After(deadline) {
			if s.cfg.Kill != nil {
				s.cfg.Kill(cmd)
			} else {
				_ = cmd.Process.Kill()
			}
			<-done
			return fmt.Errorf("%s on port %d was not ready within %s: %w", s.cfg.Name, s.Port, s.cfg.Timeout, readyErr)
		}
		select {
		case <-done:
			out, _ := os.ReadFile(log)
			return fmt.Errorf("%s on port %d exited at start: %s", s.cfg.Name, s.Port, out)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Missing is the error of a server whose programs are not installed.
type Missing struct {
	// What says what to install.
	What string
}

func (m *Missing) Error() string { return m.What + " is not installed" }

// Unavailable ends a test whose server could not start: a missing program
// skips it with one line, unless the environment variable require is 1
// (CI sets it), which makes every failure fail the test.
func Unavailable(t testing.TB, pkg, require string, err error) {
	t.Helper()
	var missing *Missing
	if os.Getenv(require) == "1" || !errors.As(err, &missing) {
		t.Fatalf("%s: %v", pkg, err)
	}
	t.Skipf("%s: %v (set %s=1 to fail instead)", pkg, err, require)
}
