package spawn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary a server: it listens on the port the
// variable holds and accepts connections until killed, or with "fail"
// says so and exits.
const helperEnv = "NQD_SPAWN_TEST_SERVER"

func TestMain(m *testing.M) {
	if port := os.Getenv(helperEnv); port != "" {
		serve(port)
		return
	}
	os.Exit(m.Run())
}

func serve(port string) {
	if port == "fail" {
		fmt.Println("cannot start: configuration refused")
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(1)
		}
		_ = c.Close()
	}
}

func helperConfig(t *testing.T, arg func(port int) string) Config {
	return Config{
		Name: "helper", Dir: t.TempDir(), Log: "helper.log",
		Command: func(port int) *exec.Cmd {
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), helperEnv+"="+arg(port))
			return cmd
		},
		Ready: func(ctx context.Context, port int) error {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err == nil {
				_ = c.Close()
			}
			return err
		},
		Timeout: 30 * time.Second,
	}
}

// TestServerKillAndRestart: a launched server answers on its port; killed
// it answers no more and has no pid; restarted it answers on the same port.
func TestServerKillAndRestart(t *testing.T) {
	cfg := helperConfig(t, strconv.Itoa)
	s, err := Launch(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	if s.PID() == 0 {
		t.Fatal("a running server has no pid")
	}
	ready := func() error { return cfg.Ready(t.Context(), s.Port) }
	if err := ready(); err != nil {
		t.Fatalf("launched server: %v", err)
	}
	if err := s.Signal(syscall.SIGCONT); err != nil {
		t.Errorf("a signal to a running server: %v", err)
	}
	s.Kill()
	if s.PID() != 0 {
		t.Error("a killed server still has a pid")
	}
	if err := ready(); err == nil {
		t.Fatal("a killed server answered")
	}
	if err := s.Signal(syscall.SIGCONT); err == nil {
		t.Error("a signal to a killed server was sent")
	}
	s.Kill() // killing a stopped server does nothing
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := ready(); err != nil {
		t.Fatalf("restarted server on port %d: %v", s.Port, err)
	}
}

// TestServerExitAtStart: a server that exits at start is an error that
// carries what it wrote.
func TestServerExitAtStart(t *testing.T) {
	_, err := Launch(helperConfig(t, func(int) string { return "fail" }))
	if err == nil || !strings.Contains(err.Error(), "exited at start: cannot start: configuration refused") {
		t.Fatalf("err = %v, want an exit at start with the server's output", err)
	}
}

// TestMissingSkipsUnlessRequired: a missing program skips a test, unless its
// requirement is set; any other failure fails it.
func TestMissingSkipsUnlessRequired(t *testing.T) {
	missing := fmt.Errorf("start: %w", &Missing{What: "helper-server"})
	for _, c := range []struct {
		name    string
		require string
		err     error
		want    string // "skip" or "fail"
	}{
		{"missing", "", missing, "skip"},
		{"missing, required", "1", missing, "fail"},
		{"broken", "", errors.New("exited at start"), "fail"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("NQD_REQUIRE_HELPER", c.require)
			got := "pass"
			done := make(chan struct{})
			go func() {
				defer close(done)
				r := &recorder{TB: t}
				defer func() {
					switch {
					case r.failed:
						got = "fail"
					case r.skipped:
						got = "skip"
					}
				}()
				Unavailable(r, "spawntest", "NQD_REQUIRE_HELPER", c.err)
			}()
			<-done
			if got != c.want {
				t.Errorf("Unavailable: %s, want %s", got, c.want)
			}
		})
	}
}

// recorder notes a Fatalf or Skipf and ends its goroutine as they would.
type recorder struct {
	testing.TB
	failed, skipped bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Fatalf(string, ...any) { r.failed = true; runtime.Goexit() }
func (r *recorder) Skipf(string, ...any)  { r.skipped = true; runtime.Goexit() }
