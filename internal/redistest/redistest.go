// Package redistest gives nqd's tests a real Redis: one throwaway
// redis-server per test binary (or the server named by REDIS_ADDR), a unique
// key prefix per test so tests can run in parallel, and dedicated servers that
// a test may kill and restart.
//
// A missing redis-server skips the test, unless NQD_REQUIRE_REDIS=1, which
// turns it into a failure so CI cannot pass by skipping.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/internal/spawn"
	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long a fresh server may take to answer PING.
const startTimeout = 15 * time.Second

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
	prefixSeq  atomic.Uint64
)

// Addr returns the address of the Redis shared by every test of this binary,
// starting it on first use. It honours REDIS_ADDR.
func Addr(t testing.TB) string {
	t.Helper()
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		return addr
	}
	sharedOnce.Do(func() {
		// The shared server lives as long as the test binary; the kernel
		// signal set up in spawn ends it when the binary exits, and a later
		// run removes its directory.
		dir, err := spawn.OwnedTempDir("nqd-redistest-")
		if err != nil {
			sharedErr = err
			return
		}
		if shared, sharedErr = launch(Options{}, dir, 0, nil); sharedErr != nil {
			_ = os.RemoveAll(dir)
		}
	})
	if sharedErr != nil {
		unavailable(t, sharedErr)
	}
	return shared.Addr
}

// Client returns a client of the shared Redis, closed when the test ends.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: Addr(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Prefix returns a key prefix no other test uses and deletes every key under
// it when the test ends. Keys are expected to look like `<prefix>:...`.
func Prefix(t testing.TB) string {
	t.Helper()
	addr := Addr(t)
	p := fmt.Sprintf("nqt%d%d", os.Getpid(), prefixSeq.Add(1))
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer func() { _ = c.Close() }()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := DeleteKeys(ctx, c, p+":*"); err != nil {
			t.Errorf("redistest: delete keys of %s: %v", p, err)
		}
	})
	return p
}

// DeleteKeys removes every key matching pattern, scanning so a large keyspace
// never blocks the server.
func DeleteKeys(ctx context.Context, c redis.UniversalClient, pattern string) error {
	iter := c.Scan(ctx, 0, pattern, 500).Iterator()
	batch := make([]string, 0, 500)
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == cap(batch) {
			if err := c.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return c.Unlink(ctx, batch...).Err()
	}
	return nil
}

// Options configure a dedicated server.
type Options struct {
	// AOF turns on the append-only file with fsync on every write, so a
	// killed server restarts with every acknowledged write.
	AOF bool
}

// Server is a redis-server process owned by one test.
type Server struct {
	Addr string
	dir  string
	port int
	opts Options

	args []string // more redis-server arguments, such as a cluster node's

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs a dedicated redis-server that the test may Kill and Restart. It
// is killed when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := launch(opts, t.TempDir(), 0, nil)
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(func() { s.Kill() })
	return s
}

// Kill ends the server at once with SIGKILL, as a crash would, and waits for
// the process to exit. Killing a stopped server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Stop freezes the server with SIGSTOP, as a stalled process or a cut
// link would: it reads nothing and answers nothing, and what peers send it
// waits in the kernel's socket buffers, or in their own, until Continue.
func (s *Server) Stop(t testing.TB) { s.signal(t, syscall.SIGSTOP) }

// Continue resumes a server that Stop froze.
func (s *Server) Continue(t testing.TB) { s.signal(t, syscall.SIGCONT) }

func (s *Server) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		t.Fatalf("redistest: %s is not running", s.Addr)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("redistest: %v to %s: %v", sig, s.Addr, err)
	}
}

// Restart kills the server if it runs and starts it again on the same port
// with the same directory, so an AOF server comes back with its data.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd, done, err := run(s.opts, s.dir, s.port, s.args)
	if err != nil {
		t.Fatalf("redistest: restart redis-server on port %d: %v", s.port, err)
	}
	s.cmd, s.done = cmd, done
}

func launch(opts Options, dir string, port int, extra []string) (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errMissing
	}
	var lastErr error
	// A free port found by listening may be taken by someone else before
	// redis-server binds it; a few attempts make that race harmless.
	for range 3 {
		p := port
		if p == 0 {
			var err error
			if p, err = freePort(); err != nil {
				return nil, err
			}
		}
		cmd, done, err := run(opts, dir, p, extra)
		if err == nil {
			return &Server{Addr: "127.0.0.1:" + strconv.Itoa(p), dir: dir, port: p, opts: opts, args: extra, cmd: cmd, done: done}, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// run starts redis-server and waits until it answers PING.
func run(opts Options, dir string, port int, extra []string) (*exec.Cmd, chan struct{}, error) {
	args := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--dir", dir, "--daemonize", "no", "--loglevel", "warning",
		"--logfile", "redis.log",
	}
	if opts.AOF {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	args = append(args, extra...)
	cmd := exec.Command("redis-server", args...)
	cmd.Dir = dir
	if err := spawn.Start(cmd, nil); err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(startTimeout)
	for {
		if pingErr := ping(addr); pingErr == nil {
			return cmd, done, nil
		} else if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return nil, nil, fmt.Errorf("redis-server on %s did not answer PING within %s: %w", addr, startTimeout, pingErr)
		}
		select {
		case <-done:
			return nil, nil, fmt.Errorf("redis-server on %s exited at start (see %s/redis.log)", addr, dir)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		// A server still loading its AOF answers -LOADING.
		return errors.New(strings.TrimSpace(line))
	}
	return nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

var errMissing = errors.New("redis-server is not installed")

// unavailable skips the test, or fails it when CI requires Redis.
func unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("NQD_REQUIRE_REDIS") == "1" || !errors.Is(err, errMissing) {
		t.Fatalf("redistest: %v", err)
	}
	t.Skipf("redistest: %v (set NQD_REQUIRE_REDIS=1 to fail instead)", err)
}
