package boltstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

func newTestStore(t testing.TB, path string, opts boltstore.Options) *boltstore.Store {
	t.Helper()
	opts.Logger = testkit.Logger(t)
	s, err := boltstore.Open(path, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func tempPath(t testing.TB) string { return filepath.Join(t.TempDir(), "nqd.db") }

func TestConformance(t *testing.T) {
	storetest.RunAll(t, func(t *testing.T, opts storetest.Options) storetest.Harness {
		// The wall clock, which the suite may move ahead so that TTLs
		// expire without waiting.
		var ahead atomic.Int64
		s := newTestStore(t, tempPath(t), boltstore.Options{
			Retention: opts.Retention,
			Now:       func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) },
		})
		return storetest.Harness{
			Store:   s,
			Advance: func(d time.Duration) { ahead.Add(int64(d)) },
			// One process owns the file, so a second instance is this one.
			Reopen: func() store.Backend { return s },
		}
	})
}

func BenchmarkConformance(b *testing.B) {
	storetest.RunBenchmarks(b, func(b *testing.B) store.Store {
		return newTestStore(b, tempPath(b), boltstore.Options{})
	})
}

func BenchmarkKV(b *testing.B) {
	storetest.RunKVBenchmarks(b, func(b *testing.B) store.KV {
		return newTestStore(b, tempPath(b), boltstore.Options{})
	})
}

func TestEventsSurviveReopen(t *testing.T) {
	path := tempPath(t)
	c := store.Context{Type: "flow", ID: "run-1"}
	s, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Append(t.Context(), c, []event.Event{
		{Kind: "flow.started", Subject: c.ID, FlowName: "billing", Data: json.RawMessage(`{"input":1}`)},
		{Kind: "step.started", Subject: c.ID, Step: "charge"},
	}, store.AppendOptions{IdempotencyKey: "start-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(t.Context(), c, []event.Event{{Kind: "log"}}, store.AppendOptions{}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Append after Close = %v, want ErrClosed", err)
	}

	s = newTestStore(t, path, boltstore.Options{})
	got, err := s.Range(t.Context(), c, store.RangeQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(res.Events, got, cmp.Comparer(func(a, b json.RawMessage) bool { return string(a) == string(b) })); d != "" {
		t.Errorf("events after reopen (-want +got):\n%s", d)
	}
	page, err := s.IndexList(t.Context(), store.Index{Type: "flow", Name: "billing"}, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := []store.IndexEntry{{ID: c.ID, Score: int64(res.Events[0].ID.MS)}}; !cmp.Equal(want, page.Entries) {
		t.Errorf("flows:billing after reopen = %+v, want %+v", page.Entries, want)
	}
	again, err := s.Append(t.Context(), c, []event.Event{{Kind: "flow.started"}}, store.AppendOptions{IdempotencyKey: "start-1"})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || !cmp.Equal(ids(res.Events), ids(again.Events)) {
		t.Errorf("idempotent repeat after reopen: Replayed %v, ids %v; want true, %v", again.Replayed, ids(again.Events), ids(res.Events))
	}
	next, err := s.Append(t.Context(), c, []event.Event{{Kind: "log"}}, store.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if next.Events[0].ID.Compare(res.Events[1].ID) <= 0 {
		t.Errorf("id after reopen %v, want after %v", next.Events[0].ID, res.Events[1].ID)
	}
}

func ids(es []event.Event) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID.String()
	}
	return out
}

func TestIDsNeverGoBackwards(t *testing.T) {
	clock := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
	s := newTestStore(t, tempPath(t), boltstore.Options{Now: clock.Now})
	c := store.Context{Type: "flow", ID: "run-clock"}
	appendOne := func() event.ID {
		t.Helper()
		res, err := s.Append(t.Context(), c, []event.Event{{Kind: "log"}, {Kind: "log"}}, store.AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return res.Events[1].ID
	}

	want := []event.ID{{MS: 1_700_000_000_000, Seq: 1}}
	got := []event.ID{appendOne()}
	clock.Add(-time.Hour)
	want = append(want, event.ID{MS: 1_700_000_000_000, Seq: 3})
	got = append(got, appendOne())
	clock.Add(2 * time.Hour)
	want = append(want, event.ID{MS: 1_700_003_600_000, Seq: 1})
	got = append(got, appendOne())
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("last id of each append (-want +got):\n%s", d)
	}
}

func TestIdempotencyWindowExpires(t *testing.T) {
	clock := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
	s := newTestStore(t, tempPath(t), boltstore.Options{Now: clock.Now, IdempotencyWindow: time.Minute})
	c := store.Context{Type: "flow", ID: "run-window"}
	opts := store.AppendOptions{IdempotencyKey: "k"}
	appendKeyed := func() store.AppendResult {
		t.Helper()
		res, err := s.Append(t.Context(), c, []event.Event{{Kind: "log"}}, opts)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	first := appendKeyed()
	clock.Add(time.Minute - time.Millisecond)
	if res := appendKeyed(); !res.Replayed || res.Events[0].ID != first.Events[0].ID {
		t.Errorf("inside the window: Replayed %v id %v, want true %v", res.Replayed, res.Events[0].ID, first.Events[0].ID)
	}
	clock.Add(time.Millisecond)
	second := appendKeyed()
	if second.Replayed {
		t.Error("at the end of the window: Replayed = true, want a new append")
	}
	// The key's new record starts a new window.
	clock.Add(30 * time.Second)
	if res := appendKeyed(); !res.Replayed || res.Events[0].ID != second.Events[0].ID {
		t.Errorf("inside the new window: Replayed %v id %v, want true %v", res.Replayed, res.Events[0].ID, second.Events[0].ID)
	}
	info, err := s.Info(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if info.Length != 2 {
		t.Errorf("length = %d, want 2", info.Length)
	}
}

func TestOpenLockedFileFails(t *testing.T) {
	path := tempPath(t)
	newTestStore(t, path, boltstore.Options{})
	if s, err := boltstore.Open(path, boltstore.Options{}); err == nil {
		s.Close()
		t.Fatal("second Open of a held file succeeded")
	}
}

// Close racing with appends: every append either reports success and is on
// disk after reopening, or reports ErrClosed and left nothing.
func TestCloseDuringAppends(t *testing.T) {
	path := tempPath(t)
	s, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const writers = 8
	type outcome struct {
		c      store.Context
		acked  []event.ID
		closed bool
	}
	results := make(chan outcome, writers)
	started := make(chan struct{}, writers)
	for w := range writers {
		go func() {
			o := outcome{c: store.Context{Type: "flow", ID: fmt.Sprintf("run-%d", w)}}
			defer func() { results <- o }()
			for {
				res, err := s.Append(context.Background(), o.c, []event.Event{{Kind: "log"}}, store.AppendOptions{})
				if errors.Is(err, store.ErrClosed) {
					o.closed = true
					return
				}
				if err != nil {
					t.Errorf("%s: %v", o.c, err)
					return
				}
				if o.acked = append(o.acked, res.Events[0].ID); len(o.acked) == 1 {
					started <- struct{}{}
				}
			}
		}()
	}
	for range writers {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("writers did not start")
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	reopened := newTestStore(t, path, boltstore.Options{})
	for range writers {
		var o outcome
		select {
		case o = <-results:
		case <-time.After(10 * time.Second):
			t.Fatal("a writer did not stop after Close")
		}
		if !o.closed {
			t.Errorf("%s: stopped without ErrClosed", o.c)
		}
		got, err := reopened.Range(t.Context(), o.c, store.RangeQuery{})
		if err != nil {
			t.Fatal(err)
		}
		stored := make([]event.ID, len(got))
		for i, e := range got {
			stored[i] = e.ID
		}
		if d := cmp.Diff(o.acked, stored); d != "" {
			t.Errorf("%s after reopen (-acknowledged +stored):\n%s", o.c, d)
		}
	}
}

// BenchmarkFileSize appends events of about 1.1 KB, ten at a time, and
// reports the file's used size per event (the pages up to its high-water
// mark; the file itself grows in doubling steps) and the time per commit:
// long streams
// (64 contexts taking turns) and short ones (each run's stream written once,
// its ids in start order as the engine's run ids are).
func BenchmarkFileSize(b *testing.B) {
	payload, _ := json.Marshal(map[string]string{"blob": strings.Repeat("x", 1000)})
	for _, shape := range []struct {
		name     string
		contexts int // 0: a new context for every batch
	}{{"Long", 64}, {"Runs", 0}} {
		b.Run(shape.name, func(b *testing.B) {
			path := tempPath(b)
			s := newTestStore(b, path, boltstore.Options{})
			batch := make([]event.Event, 10)
			n := 0
			for b.Loop() {
				id := fmt.Sprintf("run-%012d", n)
				if shape.contexts > 0 {
					id = fmt.Sprintf("run-%012d", n%shape.contexts)
				}
				c := store.Context{Type: "flow", ID: id}
				for i := range batch {
					batch[i] = event.Event{Kind: "step.log", Subject: id, Step: "work", Data: payload}
				}
				if _, err := s.Append(b.Context(), c, batch, store.AppendOptions{}); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.StopTimer()
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
			db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = db.Close() }()
			var size int64
			_ = db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil })
			b.ReportMetric(float64(size)/float64(n*len(batch)), "file-B/event")
		})
	}
}
