package boltstore

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/store"
)

// holdCommit starts a write whose commit waits for release, so that writes
// made meanwhile queue behind it; it returns once that commit runs.
func holdCommit(t *testing.T, s *Store) (release func(), done <-chan error) {
	t.Helper()
	running, hold := make(chan struct{}), make(chan struct{})
	var once sync.Once
	errc := make(chan error, 1)
	go func() {
		errc <- s.update(context.Background(), func(*bolt.Tx) error {
			once.Do(func() { close(running) })
			<-hold
			return nil
		})
	}()
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the held commit did not start")
	}
	return func() { close(hold) }, errc
}

func queued(s *Store) int {
	s.writer.mu.Lock()
	defer s.writer.mu.Unlock()
	return len(s.writer.queue)
}

// A write whose context ends while it waits for its commit is taken out of
// the queue and written never; the writes queued with it commit together.
func TestQueuedWriteLeavesOnItsContext(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "nqd.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	release, held := holdCommit(t, s)

	gone := store.Context{Type: "flow", ID: "run-gone"}
	ctx, cancel := context.WithCancel(t.Context())
	left := make(chan error, 1)
	go func() {
		_, err := s.Append(ctx, gone, []event.Event{{Kind: "log"}}, store.AppendOptions{})
		left <- err
	}()
	kept := store.Context{Type: "flow", ID: "run-kept"}
	const n = 5
	results := make(chan error, n)
	for range n {
		go func() {
			_, err := s.Append(t.Context(), kept, []event.Event{{Kind: "log"}}, store.AppendOptions{})
			results <- err
		}()
	}
	wait.For(t, 10*time.Second, time.Millisecond, "writes queued behind the held commit", func() bool { return queued(s) == n+1 })
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("a queued write whose context ended: %v, want context.Canceled", err)
	}
	release()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if info, err := s.Info(t.Context(), gone); err != nil || info.Length != 0 {
		t.Fatalf("the write that left: %+v, %v; want nothing stored", info, err)
	}
	if info, err := s.Info(t.Context(), kept); err != nil || info.Length != n {
		t.Fatalf("the writes that stayed: %+v, %v; want %d events", info, err, n)
	}
}

// A commit that panics goes up on its leader's goroutine (an HTTP handler's,
// which the server recovers) only after it passed the lead on: the writes
// queued behind it are committed, and later writes too.
func TestPanickingCommitPassesTheLead(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "nqd.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	behind := store.Context{Type: "flow", ID: "run-behind"}
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		_ = s.update(context.Background(), func(*bolt.Tx) error {
			// Not wait.For: this runs off the test's goroutine.
			for deadline := time.Now().Add(10 * time.Second); queued(s) != 1; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					panic("no write queued behind")
				}
			}
			panic("boom")
		})
	}()
	wait.For(t, 10*time.Second, time.Millisecond, "the panicking write leading", func() bool {
		s.writer.mu.Lock()
		defer s.writer.mu.Unlock()
		return s.writer.leading
	})
	if _, err := s.Append(t.Context(), behind, []event.Event{{Kind: "log"}}, store.AppendOptions{}); err != nil {
		t.Fatalf("the write queued behind the panic: %v", err)
	}
	if p := <-panicked; p != "boom" {
		t.Fatalf("recovered %v, want the commit's panic", p)
	}
	if _, err := s.Append(t.Context(), behind, []event.Event{{Kind: "log"}}, store.AppendOptions{}); err != nil {
		t.Fatalf("a write after the panic: %v", err)
	}
	if info, err := s.Info(t.Context(), behind); err != nil || info.Length != 2 {
		t.Fatalf("%+v, %v; want 2 events", info, err)
	}
}
