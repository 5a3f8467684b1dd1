package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/pgtest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/pgstore"
)

func logEvent(n int) event.Event {
	return event.Event{Kind: "log", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func receive(t *testing.T, sub store.Subscription, n int) []event.Event {
	t.Helper()
	var got []event.Event
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for len(got) < n {
		e, err := store.Receive(ctx, sub)
		if ctx.Err() != nil {
			t.Fatalf("received %d of %d events within 10s", len(got), n)
		}
		if err != nil {
			t.Fatalf("subscription ended after %d of %d events: %v", len(got), n, err)
		}
		got = append(got, e)
	}
	return got
}

// A subscriber loses nothing when the listening connection is cut: the
// events appended while it was down are read from the table once it is back.
func TestListenerLossLosesNoEvent(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s, err := pgstore.Open(t.Context(), url, pgstore.Options{Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c := store.Context{Type: "flow", ID: "cut"}
	sub, err := s.Subscribe(t.Context(), c, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	admin := connect(t, url)
	var schema string
	if err := admin.QueryRow(t.Context(), "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	var killed int
	err = admin.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE query = $1`, `LISTEN "nqd_events.`+schema+`"`).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminated %d listeners, %v; want 1", killed, err)
	}
	var want []event.Event
	for i := range 5 {
		res, err := s.Append(t.Context(), c, []event.Event{logEvent(i)}, store.AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, res.Events...)
	}
	got := receive(t, sub, len(want))
	for i := range want {
		if got[i].ID != want[i].ID {
			t.Fatalf("event %d: got %s, want %s", i, got[i].ID, want[i].ID)
		}
	}
}

// Appends to one context wait for each other; appends to another do not.
func TestAppendLocksOnlyItsContext(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s, err := pgstore.Open(t.Context(), url, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	a, b := store.Context{Type: "flow", ID: "a"}, store.Context{Type: "flow", ID: "b"}
	for _, c := range []store.Context{a, b} {
		if _, err := s.Append(t.Context(), c, []event.Event{logEvent(0)}, store.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	holder := connect(t, url)
	tx, err := holder.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM nqd_streams WHERE ctx = 'flow:a' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := s.Append(ctx, b, []event.Event{logEvent(1)}, store.AppendOptions{}); err != nil {
		t.Fatalf("append to b while a is locked: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Append(context.Background(), a, []event.Event{logEvent(2)}, store.AppendOptions{})
		done <- err
	}()
	// The append to a is waiting for the lock once PostgreSQL says so. The
	// question goes over a connection of its own: inside the holder's
	// transaction pg_stat_activity would answer from one snapshot.
	watcher := connect(t, url)
	wait.For(t, 10*time.Second, 10*time.Millisecond, "the append to a to wait for its row lock", func() bool {
		var waiting int
		_ = watcher.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%nqd_append%'`).Scan(&waiting)
		return waiting > 0
	})
	select {
	case err := <-done:
		t.Fatalf("append to a finished (%v) while its row was locked", err)
	default:
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("append to a still waiting after the lock was released")
	}
}

// Instances starting together on an empty schema apply each migration once.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	const n = 4
	var wg sync.WaitGroup
	stores := make([]*pgstore.Store, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = pgstore.Open(t.Context(), url, pgstore.Options{}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		t.Cleanup(func() { _ = stores[i].Close() })
	}
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("migrations: %v, %v", files, err)
	}
	v, err := stores[0].SchemaVersion(t.Context())
	if err != nil || v != len(files) {
		t.Fatalf("SchemaVersion = %d, %v; want %d, one per migration", v, err, len(files))
	}
	var rows int
	if err := connect(t, url).QueryRow(t.Context(), `SELECT count(*) FROM nqd_schema_version`).Scan(&rows); err != nil || rows != len(files) {
		t.Fatalf("nqd_schema_version has %d rows, %v; want %d", rows, err, len(files))
	}
}

// A server that went away makes writes fail with ErrUnavailable; once it is
// back the same store writes and delivers again, and nothing acknowledged
// before the crash is lost.
func TestServerDownIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	s, err := pgstore.Open(t.Context(), srv.URL, pgstore.Options{Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c := store.Context{Type: "flow", ID: "down"}
	if _, err := s.Append(t.Context(), c, []event.Event{logEvent(0)}, store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := s.Append(ctx, c, []event.Event{logEvent(1)}, store.AppendOptions{}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("append with the server down: %v, want ErrUnavailable", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Ping with the server down: %v, want ErrUnavailable", err)
	}
	sub, err := s.Subscribe(ctx, store.Context{Type: "flow", ID: "down"}, 10)
	if err == nil {
		sub.Close()
		t.Fatal("Subscribe with the server down succeeded")
	}

	srv.Restart(t)
	wait.For(t, 10*time.Second, 20*time.Millisecond, "the store to answer again", func() bool {
		return s.Ping(ctx) == nil
	})
	sub, err = s.Subscribe(ctx, c, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	res, err := s.Append(ctx, c, []event.Event{logEvent(2)}, store.AppendOptions{})
	if err != nil {
		t.Fatalf("append after the restart: %v", err)
	}
	if got := receive(t, sub, 1); got[0].ID != res.Events[0].ID {
		t.Fatalf("live event after the restart: got %s, want %s", got[0].ID, res.Events[0].ID)
	}
	info, err := s.Info(ctx, c)
	if err != nil || info.Length != 2 {
		t.Fatalf("Info after the restart = %+v, %v; want the 2 acknowledged events", info, err)
	}
}

// Two instances on one schema: subscribers on each see every event that
// writers on both appended, once and in stream order.
func TestTwoInstancesShareStreams(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	open := func() *pgstore.Store {
		s, err := pgstore.Open(t.Context(), url, pgstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b := open(), open()
	c := store.Context{Type: "flow", ID: "shared"}
	var subs []store.Subscription
	for _, s := range []*pgstore.Store{a, b} {
		sub, err := s.Subscribe(t.Context(), c, 1000)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		subs = append(subs, sub)
	}
	const writers, each = 4, 25
	var wg sync.WaitGroup
	for w := range writers {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Go(func() {
			for i := range each {
				if _, err := s.Append(context.Background(), c, []event.Event{logEvent(w*each + i)}, store.AppendOptions{}); err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	stored, err := a.Range(t.Context(), c, store.RangeQuery{})
	if err != nil || len(stored) != writers*each {
		t.Fatalf("stored %d events, %v; want %d", len(stored), err, writers*each)
	}
	for i, sub := range subs {
		got := receive(t, sub, len(stored))
		for j := range stored {
			if got[j].ID != stored[j].ID {
				t.Fatalf("subscriber %d, event %d: got %s, want %s", i, j, got[j].ID, stored[j].ID)
			}
		}
	}
}
