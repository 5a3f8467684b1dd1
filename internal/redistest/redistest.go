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
	// shared is the server every test of this binary shares, started on
	// first use. It lives as long as the test binary: the kernel signal set
	// up in spawn ends it when the binary exits, and a later run removes its
	// directory.
	shared    = sync.OnceValues(func() (*Server, error) { return Launch(Options{}) })
	prefixSeq atomic.Uint64
)

// Addr returns the address of the Redis shared by every test of this binary,
// starting it on first use. It honours REDIS_ADDR.
func Addr(t testing.TB) string {
	t.Helper()
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		return addr
	}
	s, err := shared()
	if err != nil {
		unavailable(t, err)
	}
	return s.Addr
}

// Client returns a client of the shared Redis, closed when the test ends.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: Addr(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Prefix returns a key prefix no other test uses and deletes every key under
// it when the test ends. Keys are expected to look like `<prefix>:...`, or
// `{<prefix>:...`.
func Prefix(t testing.TB) string {
	t.Helper()
	addr := Addr(t)
	p := fmt.Sprintf("nqt%d%d", os.Getpid(), prefixSeq.Add(1))
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer func() { _ = c.Close() }()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// A store of several shards tags its keys {<prefix>:<n>}.
		for _, pattern := range []string{p + ":*", "{" + p + ":*"} {
			if err := DeleteKeys(ctx, c, pattern); err != nil {
				t.Errorf("redistest: delete keys of %s: %v", p, err)
			}
		}
	})
	return p
}

// DeleteKeys removes every key matching pattern, scanning so a large keyspace
// never blocks the server. Each key goes in a command of its own, in one
// pipeline per batch: a cluster node refuses one command over keys of
// several slots.
func DeleteKeys(ctx context.Context, c redis.UniversalClient, pattern string) error {
	iter := c.Scan(ctx, 0, pattern, 500).Iterator()
	batch := make([]string, 0, 500)
	unlink := func() error {
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range batch {
				p.Unlink(ctx, k)
			}
			return nil
		})
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == cap(batch) {
			if err := unlink(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return unlink()
	}
	return nil
}

// Options configure a dedicated server.
type Options struct {
	// AOF turns on the append-only file with fsync on every write, so a
	// killed server restarts with every acknowledged write.
	AOF bool
}

// Server is a redis-server process that a test may kill and restart.
type Server struct {
	Addr string
	dir  string
	proc *spawn.Server
}

// Start runs a dedicated redis-server that the test may Kill and Restart; it
// is killed and its directory removed when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := Launch(opts)
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(s.Close)
	return s
}

// Launch starts a dedicated server outside a test, for a benchmark; the
// caller must Close it. Like the test servers it dies with this process,
// however that ends.
func Launch(opts Options) (*Server, error) {
	dir, err := spawn.OwnedTempDir("nqd-redistest-")
	if err != nil {
		return nil, err
	}
	s, err := launch(opts, dir, nil)
	if err != nil {
		_ = os.RemoveAll(dir)
	}
	return s, err
}

// Kill ends the server at once with SIGKILL, as a crash would, and waits for
// the process to exit. Killing a stopped server does nothing.
func (s *Server) Kill() { s.proc.Kill() }

// Stop freezes the server with SIGSTOP, as a stalled process or a cut
// link would: it reads nothing and answers nothing, and what peers send it
// waits in the kernel's socket buffers, or in their own, until Continue.
func (s *Server) Stop(t testing.TB) { s.signal(t, syscall.SIGSTOP) }

// Continue resumes a server that Stop froze.
func (s *Server) Continue(t testing.TB) { s.signal(t, syscall.SIGCONT) }

func (s *Server) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := s.proc.Signal(sig); err != nil {
		t.Fatalf("redistest: %v to %s: %v", sig, s.Addr, err)
	}
}

// Restart kills the server if it runs and starts it again on the same port
// with the same directory, so an AOF server comes back with its data.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.proc.Restart(); err != nil {
		t.Fatalf("redistest: restart redis-server on port %d: %v", s.proc.Port, err)
	}
}

// Close kills the server and removes its directory.
func (s *Server) Close() {
	s.Kill()
	_ = os.RemoveAll(s.dir)
}

// PID is the server's process id, or 0 when it is stopped.
func (s *Server) PID() int { return s.proc.PID() }

// launch starts redis-server in dir on a free port, with the extra
// arguments (a cluster node's), and waits until it answers PING.
func launch(opts Options, dir string, extra []string) (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, &spawn.Missing{What: "redis-server"}
	}
	proc, err := spawn.Launch(spawn.Config{
		Name: "redis-server", Dir: dir, Log: "redis.log",
		Command: func(port int) *exec.Cmd {
			args := []string{
				"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
				"--save", "", "--dir", dir, "--daemonize", "no", "--loglevel", "warning",
			}
			if opts.AOF {
				args = append(args, "--appendonly", "yes", "--appendfsync", "always")
			} else {
				args = append(args, "--appendonly", "no")
			}
			return exec.Command("redis-server", append(args, extra...)...)
		},
		Ready:   func(_ context.Context, port int) error { return ping("127.0.0.1:" + strconv.Itoa(port)) },
		Timeout: startTimeout,
	})
	if err != nil {
		return nil, err
	}
	return &Server{Addr: "127.0.0.1:" + strconv.Itoa(proc.Port), dir: dir, proc: proc}, nil
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

// unavailable skips the test, or fails it when CI requires Redis.
func unavailable(t testing.TB, err error) {
	t.Helper()
	spawn.Unavailable(t, "redistest", "NQD_REQUIRE_REDIS", err)
}
