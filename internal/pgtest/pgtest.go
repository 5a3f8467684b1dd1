// Package pgtest gives nqd's tests a real PostgreSQL: one throwaway server per
// test binary (or the server named by POSTGRES_URL), and a schema of its own
// per test so tests can run in parallel.
//
// The server is found on PATH or in /usr/lib/postgresql/<version>/bin (the
// newest version), initialised in a temporary directory and started on a free
// port. PostgreSQL refuses to run as root, so a root test binary runs it as
// the postgres user (or nobody).
//
// A missing server skips the test, unless NQD_REQUIRE_POSTGRES=1, which turns
// it into a failure so CI cannot pass by skipping.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nqd-dev/nqd/internal/spawn"
)

// startTimeout bounds how long a fresh server may take to accept connections.
const startTimeout = 30 * time.Second

var (
	// shared is the server every test of this binary shares, started on
	// first use. It lives as long as the test binary: the kernel signal set
	// up in spawn ends it when the binary exits, and a later run removes its
	// directory.
	shared    = sync.OnceValues(Launch)
	schemaSeq atomic.Uint64
)

// URL returns the connection URL of a schema that no other test uses, on the
// PostgreSQL shared by every test of this binary (started on first use, or
// the one POSTGRES_URL names). The URL sets search_path to that schema, so a
// store opened with it keeps its tables there. The schema is dropped when the
// test ends.
func URL(t testing.TB) string {
	t.Helper()
	base := serverURL(t)
	schema := fmt.Sprintf("nqt%d_%d", os.Getpid(), schemaSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := exec1(ctx, base, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("pgtest: create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := exec1(ctx, base, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", schema, err)
		}
	})
	return WithSearchPath(base, schema)
}

// WithSearchPath returns rawURL with its search_path set to schema.
func WithSearchPath(rawURL, schema string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func serverURL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("POSTGRES_URL"); u != "" {
		return u
	}
	s, err := shared()
	if err != nil {
		unavailable(t, err)
	}
	return s.URL
}

func exec1(ctx context.Context, connURL, sql string) error {
	conn, err := pgx.Connect(ctx, connURL)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(ctx, sql)
	return err
}

// Server is a postgres process that a test may kill and restart.
type Server struct {
	URL  string
	dir  string
	proc *spawn.Server
}

// Start runs a dedicated server that the test may Kill and Restart; it is
// killed and its directory removed when the test ends. Tests that stop or
// break their server use it instead of URL.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := Launch()
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(s.Close)
	return s
}

// Launch starts a dedicated server outside a test, for a benchmark that
// measures nqd on PostgreSQL; the caller must Close it. Like the test
// servers it dies with this process, however that ends.
func Launch() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := spawn.OwnedTempDir("nqd-pgtest-")
	if err != nil {
		return nil, err
	}
	s, err := launch(bin, dir, cred)
	if err != nil {
		_ = os.RemoveAll(dir)
	}
	return s, err
}

// Kill ends the server at once with SIGKILL, as a crash would, and waits for
// it to exit. Killing a stopped server does nothing.
func (s *Server) Kill() { s.proc.Kill() }

// Restart kills the server if it runs and starts it again on the same port
// with the same data directory, so it comes back with every committed write.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	// The killed backends detach from the shared memory as they exit, a
	// moment after the postmaster; until then a new postmaster refuses to
	// start, so it is tried again for a while.
	deadline := time.Now().Add(startTimeout)
	for {
		err := s.proc.Restart()
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "is still in use") || time.Now().After(deadline) {
			t.Fatalf("pgtest: restart postgres on port %d: %v", s.proc.Port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Close kills the server and removes its directory.
func (s *Server) Close() {
	s.Kill()
	_ = os.RemoveAll(s.dir)
}

// PID is the postmaster's process id, or 0 when the server is stopped; its
// backends are its children.
func (s *Server) PID() int { return s.proc.PID() }

// launch initialises a cluster in dir and starts it on a free port.
func launch(bin, dir string, cred *syscall.Credential) (*Server, error) {
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"),
		"-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions",
		// Small WAL segments keep a throwaway cluster a few megabytes.
		"--wal-segsize=1")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	proc, err := spawn.Launch(spawn.Config{
		Name: "postgres", Dir: dir, Log: "postgres.log", Cred: cred,
		Command: func(port int) *exec.Cmd {
			return exec.Command(filepath.Join(bin, "postgres"),
				"-D", data, "-p", strconv.Itoa(port),
				"-c", "listen_addresses=127.0.0.1",
				"-c", "unix_socket_directories="+dir,
				"-c", "max_connections=400",
				// A throwaway server: durability across a machine crash buys
				// nothing, but a killed server must keep what it
				// acknowledged, so commits still wait for the WAL write.
				"-c", "fsync=off", "-c", "full_page_writes=off",
				"-c", "min_wal_size=2MB", "-c", "max_wal_size=64MB",
			)
		},
		Ready:   func(ctx context.Context, port int) error { return exec1(ctx, serverURLOf(port), "SELECT 1") },
		Timeout: startTimeout,
		Kill:    kill,
	})
	if err != nil {
		return nil, err
	}
	return &Server{URL: serverURLOf(proc.Port), dir: dir, proc: proc}, nil
}

func serverURLOf(port int) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
}

// binDir finds the directory holding initdb and postgres: PATH first, then
// the newest /usr/lib/postgresql/<version>/bin.
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", &spawn.Missing{What: "PostgreSQL (initdb, postgres)"}
}

// version reads the major version out of /usr/lib/postgresql/<version>/bin.
func version(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

// credential returns whom to run PostgreSQL as: nil (this process's user)
// unless that is root, which PostgreSQL refuses.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
	}
	return nil, errors.New("running as root and neither a postgres nor a nobody user exists to run PostgreSQL as")
}

// unavailable skips the test, or fails it when CI requires PostgreSQL.
func unavailable(t testing.TB, err error) {
	t.Helper()
	spawn.Unavailable(t, "pgtest", "NQD_REQUIRE_POSTGRES", err)
}
