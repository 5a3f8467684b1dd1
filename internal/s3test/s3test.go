// Package s3test starts an S3-compatible server for tests: gofakes3 keeping
// its objects in a bolt file, served over real HTTP on a free port, so the
// code under test talks to it through the AWS SDK as it would to S3 or MinIO.
// It can be taken down and brought back, and can cut uploads off mid-way.
package s3test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3bolt"
	bolt "go.etcd.io/bbolt"
)

// Server is a running S3-compatible server.
type Server struct {
	addr    string
	backend *s3bolt.Backend
	handler http.Handler

	mu   sync.Mutex
	srv  *http.Server
	done chan struct{}

	cutAfter atomic.Int64 // >0: uploads lose their connection after this many body bytes
	cuts     atomic.Int64
}

// Start runs a server until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "s3.bolt"), 0o600, nil)
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	backend := s3bolt.New(db)
	faker := gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog()))
	s := &Server{backend: backend}
	s.handler = s.faults(faker.Server())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	s.addr = ln.Addr().String()
	s.serve(ln)
	t.Cleanup(func() {
		s.Down()
		if err := db.Close(); err != nil {
			t.Errorf("s3test: %v", err)
		}
	})
	return s
}

// Endpoint is the server's base URL, http://127.0.0.1:<port>.
func (s *Server) Endpoint() string { return "http://" + s.addr }

// Bucket creates a bucket and returns the s3:// URL that opens it: path
// style, a region, anonymous credentials (gofakes3 does not check
// signatures) and checksums only where S3 requires them.
func (s *Server) Bucket(t testing.TB, name string) string {
	t.Helper()
	if err := s.backend.CreateBucket(name); err != nil && !gofakes3.IsAlreadyExists(err) {
		t.Fatalf("s3test: bucket %s: %v", name, err)
	}
	return fmt.Sprintf("s3://%s?endpoint=%s&region=us-east-1&use_path_style=true&anonymous=true", name, s.Endpoint())
}

// Down stops the server: connections are refused until Up.
func (s *Server) Down() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	_ = s.srv.Close()
	<-s.done
	s.srv = nil
}

// Up serves again on the same port, with the objects kept.
func (s *Server) Up(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	running := s.srv != nil
	s.mu.Unlock()
	if running {
		return
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		t.Fatalf("s3test: listen again on %s: %v", s.addr, err)
	}
	s.serve(ln)
}

func (s *Server) serve(ln net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.srv = &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	s.done = make(chan struct{})
	srv, done := s.srv, s.done
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			panic(fmt.Sprintf("s3test: %v", err))
		}
	}()
}

// CutUploads makes every upload (a PUT with a body) lose its connection
// after n bytes of its body reached the server; 0 lets them through again.
func (s *Server) CutUploads(n int64) { s.cutAfter.Store(n) }

// Cuts counts the uploads cut off so far.
func (s *Server) Cuts() int64 { return s.cuts.Load() }

// faults wraps h to cut uploads off while CutUploads is set.
func (s *Server) faults(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.cutAfter.Load()
		if n <= 0 || r.Method != http.MethodPut {
			h.ServeHTTP(w, r)
			return
		}
		// Read what got through, then drop the connection without an
		// answer, as a network that failed mid-upload would.
		_, _ = io.CopyN(io.Discard, r.Body, n)
		s.cuts.Add(1)
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	})
}
