package compact_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/compact"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/s3test"
	"github.com/nqd-dev/nqd/reducers"
	"github.com/nqd-dev/nqd/snapshots"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
)

var kinds = []string{"item.added", "item.done", "item.note"}

func batch(from, n int) []event.Event {
	out := make([]event.Event, n)
	for i := range out {
		out[i] = event.Event{Kind: kinds[(from+i)%len(kinds)], Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, from+i))}
	}
	return out
}

func openStores(t *testing.T) (*boltstore.Store, *archive.Bucket) {
	t.Helper()
	st := bolttest.Open(t, boltstore.Options{})
	dir, err := archive.NewDir(filepath.Join(t.TempDir(), "archive"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return st, dir
}

func appendAll(t *testing.T, st store.Store, c store.Context, total, per int, each func([]event.Event)) {
	t.Helper()
	for i := 0; i < total; i += per {
		res, err := st.Append(t.Context(), c, batch(i, min(per, total-i)), store.AppendOptions{})
		if err != nil {
			t.Fatalf("Append: %v", err)
		}
		each(res.Events)
	}
}

func stateJSON(t *testing.T, s reducers.State) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReaderMatchesUncompacted reads a compacted stream through the archive
// with queries of every shape and compares with the reads before compaction.
func TestReaderMatchesUncompacted(t *testing.T) {
	st, dir := openStores(t)
	c := store.Context{Type: "batch", ID: "small"}
	var all []event.Event
	appendAll(t, st, c, 2500, 250, func(evs []event.Event) { all = append(all, evs...) })

	queries := []store.RangeQuery{
		{},
		{Limit: 100},
		{After: all[1499].ID, Limit: 300},
		{After: all[10].ID, Through: all[1700].ID},
		{Reverse: true},
		{Reverse: true, Limit: 700},
		{Reverse: true, Through: all[1200].ID, Limit: 50},
		{Reverse: true, After: all[1100].ID, Through: all[2099].ID},
		{After: all[2200].ID},
	}
	want := make([][]event.Event, len(queries))
	for i, q := range queries {
		got, err := st.Range(t.Context(), c, q)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = got
	}

	k := compact.New(st, dir, compact.Options{SegmentEvents: 300, PageSize: 128})
	res, err := k.Compact(t.Context(), c, all[1999].ID)
	if err != nil {
		t.Fatalf("Compact: %v", err)
	}
	if res.Checkpoint != all[1999].ID || res.Archived != 2000 || res.Trimmed != 2000 || res.Segments != 7 {
		t.Errorf("Compact = %+v, want checkpoint %s, 2000 archived in 7 segments, 2000 trimmed", res, all[1999].ID)
	}
	if info, err := st.Info(t.Context(), c); err != nil || info.Length != 500 || info.FirstID != all[2000].ID {
		t.Errorf("Info after Compact = %+v, %v; want 500 events from %s", info, err, all[2000].ID)
	}
	// A second compaction further on archives only what is new.
	res, err = k.Compact(t.Context(), c, all[2099].ID)
	if err != nil || res.Archived != 100 || res.Trimmed != 100 {
		t.Errorf("second Compact = %+v, %v; want 100 archived and trimmed", res, err)
	}

	r := compact.NewReader(st, dir)
	for i, q := range queries {
		got, err := r.Range(t.Context(), c, q)
		if err != nil {
			t.Fatalf("Range(%+v): %v", q, err)
		}
		if d := cmp.Diff(ids(want[i]), ids(got)); d != "" {
			t.Errorf("Range(%+v) through the archive (-want +got):\n%s", q, d)
		}
	}
}

func ids(evs []event.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID.String() + " " + e.Kind + " " + string(e.Data)
	}
	return out
}

// TestCompactLongRun is the property compaction exists for: a long run,
// compacted, answers time travel to an early point as the uncompacted run
// did, while the live stream keeps only its tail and the process's heap
// stays within a fixed budget.
// TestCompactLongRun compacts a 200,000-event run into a directory and into
// a bucket of a real S3-compatible server: time travel answers exactly as an
// uncompacted fold, within a fixed heap.
func TestCompactLongRun(t *testing.T) {
	t.Run("dir", func(t *testing.T) {
		st, dir := openStores(t)
		testCompactLongRun(t, st, dir)
	})
	t.Run("s3", func(t *testing.T) {
		arch, err := archive.Open(t.Context(), s3test.Start(t).Bucket(t, "segments"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer arch.Close()
		testCompactLongRun(t, bolttest.Open(t, boltstore.Options{}), arch)
	})
}

func testCompactLongRun(t *testing.T, st *boltstore.Store, dir *archive.Bucket) {
	total := 200_000
	if testing.Short() {
		total = 20_000
	}
	const tail = 1000
	c := store.Context{Type: "batch", ID: "long"}

	// The reference folds as the run is written, keeping the states at a
	// few points and never the whole run.
	r := reducers.For(c.Type)
	ref := r.Init()
	points := map[int]bool{0: true, 999: true, total / 3: true, total - tail - 1: true, total - 10: true}
	want := map[event.ID]string{}
	n := 0
	appendAll(t, st, c, total, 1000, func(evs []event.Event) {
		for _, e := range evs {
			var err error
			if ref, err = r.Fold(ref, []event.Event{e}); err != nil {
				t.Fatal(err)
			}
			if points[n] {
				want[e.ID] = stateJSON(t, ref)
			}
			n++
		}
	})
	last := ref.Position()

	// Compact through the event before the tail.
	tailStart, err := st.Range(t.Context(), c, store.RangeQuery{Reverse: true, Limit: tail + 1})
	if err != nil {
		t.Fatal(err)
	}
	keepAfter := tailStart[tail].ID
	res, err := compact.New(st, dir, compact.Options{}).Compact(t.Context(), c, keepAfter)
	if err != nil {
		t.Fatalf("Compact: %v", err)
	}
	if res.Archived != int64(total-tail) || res.Trimmed != int64(total-tail) {
		t.Errorf("Compact = %+v, want %d archived and trimmed", res, total-tail)
	}
	info, err := st.Info(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if info.Length != tail || info.LastID != last {
		t.Errorf("live stream after Compact = %+v, want its last %d events", info, tail)
	}

	cache := snapshots.New(compact.NewReader(st, dir), snapshots.Options{Checkpoints: st, CheckpointEvery: snapshots.DefaultCheckpointEvery})
	defer cache.Close()
	for at, w := range want {
		s, err := cache.StateAt(t.Context(), c, at)
		if err != nil {
			t.Fatalf("StateAt(%s): %v", at, err)
		}
		if got := stateJSON(t, s); got != w {
			t.Errorf("StateAt(%s) after Compact:\n got %s\nwant %s", at, got, w)
		}
	}
	s, err := cache.State(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if got := stateJSON(t, s); got != stateJSON(t, ref) {
		t.Errorf("State after Compact:\n got %s\nwant %s", got, stateJSON(t, ref))
	}

	// 200,000 events held at once would take far more than this.
	const heapBudget = 48 << 20
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if ms.HeapAlloc > heapBudget {
		t.Errorf("heap after compaction and reads = %d bytes, budget %d", ms.HeapAlloc, heapBudget)
	}
}
