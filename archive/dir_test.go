package archive_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

var run = store.Context{Type: "flow", ID: "run-1"}

func testEvents(n int) []event.Event {
	evs := make([]event.Event, n)
	for i := range evs {
		evs[i] = event.Event{
			ID:   event.ID{MS: 1_700_000_000_000 + uint64(i), Seq: uint64(i % 3)},
			Kind: "step.completed", Subject: run.ID, RunID: run.ID, FlowName: "pipeline", Step: "s",
			Attempt: 1, Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)),
		}
	}
	return evs
}

func newTestDir(t *testing.T) (*archive.Dir, string) {
	t.Helper()
	root := t.TempDir()
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	d, err := archive.NewDir(root, func() time.Time { return at })
	if err != nil {
		t.Fatal(err)
	}
	return d, root
}

func TestPutGetRoundTrip(t *testing.T) {
	d, root := newTestDir(t)
	ctx := context.Background()
	evs := testEvents(2500)
	record := json.RawMessage(`{"flow":"pipeline","run":"run-1","status":"completed"}`)
	m, err := d.Put(ctx, run, record, archive.Slice(evs))
	if err != nil {
		t.Fatal(err)
	}
	if m.Events != 2500 || m.FirstID != evs[0].ID.String() || m.LastID != evs[2499].ID.String() || len(m.SHA256) != 64 {
		t.Fatalf("manifest %+v", m)
	}
	for _, name := range []string{"run-1.ndjson.gz", "run-1.manifest.json"} {
		if _, err := os.Stat(filepath.Join(root, "flow", name)); err != nil {
			t.Errorf("archive file: %v", err)
		}
	}

	gm, got, err := d.Get(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(evs, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(m, gm); diff != "" {
		t.Errorf("manifest (-put +get):\n%s", diff)
	}
	if string(gm.Record) != string(record) {
		t.Errorf("record %s, want %s", gm.Record, record)
	}

	list, err := d.List(ctx, "flow")
	if err != nil || len(list) != 1 || list[0].ID != "run-1" {
		t.Fatalf("List = %v, %v", list, err)
	}
}

func TestGetMissing(t *testing.T) {
	d, _ := newTestDir(t)
	if _, _, err := d.Get(context.Background(), run); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	if _, err := d.Verify(context.Background(), store.Context{Type: "flow", ID: ".."}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
}

func TestVerifyDetectsCorruption(t *testing.T) {
	cases := map[string]func(t *testing.T, data, manifest string){
		"flipped byte": func(t *testing.T, data, _ string) {
			b := mustRead(t, data)
			b[len(b)/2] ^= 0x01
			mustWrite(t, data, b)
		},
		"truncated": func(t *testing.T, data, _ string) {
			b := mustRead(t, data)
			mustWrite(t, data, b[:len(b)-10])
		},
		"appended bytes": func(t *testing.T, data, _ string) {
			mustWrite(t, data, append(mustRead(t, data), 0, 0, 0))
		},
		"events file gone": func(t *testing.T, data, _ string) {
			if err := os.Remove(data); err != nil {
				t.Fatal(err)
			}
		},
		"manifest count changed": func(t *testing.T, _, manifest string) {
			var m archive.Manifest
			if err := json.Unmarshal(mustRead(t, manifest), &m); err != nil {
				t.Fatal(err)
			}
			m.Events--
			b, _ := json.Marshal(m)
			mustWrite(t, manifest, b)
		},
		"manifest garbage": func(t *testing.T, _, manifest string) {
			mustWrite(t, manifest, []byte("{"))
		},
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			d, root := newTestDir(t)
			ctx := context.Background()
			if _, err := d.Put(ctx, run, nil, archive.Slice(testEvents(300))); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Verify(ctx, run); err != nil {
				t.Fatalf("intact archive: %v", err)
			}
			corrupt(t, filepath.Join(root, "flow", "run-1.ndjson.gz"), filepath.Join(root, "flow", "run-1.manifest.json"))
			if _, err := d.Verify(ctx, run); !errors.Is(err, archive.ErrCorrupt) {
				t.Fatalf("Verify = %v, want ErrCorrupt", err)
			}
			if _, evs, err := d.Get(ctx, run); !errors.Is(err, archive.ErrCorrupt) || evs != nil {
				t.Fatalf("Get = %d events, %v; want none and ErrCorrupt", len(evs), err)
			}
		})
	}
}

func TestPutAbortKeepsEarlierArchive(t *testing.T) {
	d, _ := newTestDir(t)
	ctx := context.Background()
	evs := testEvents(10)
	if _, err := d.Put(ctx, run, nil, archive.Slice(evs)); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("read failed")
	failing := func(yield func(event.Event, error) bool) {
		if yield(evs[0], nil) {
			yield(event.Event{}, boom)
		}
	}
	if _, err := d.Put(ctx, run, nil, failing); !errors.Is(err, boom) {
		t.Fatalf("Put = %v, want %v", err, boom)
	}
	_, got, err := d.Get(ctx, run)
	if err != nil || len(got) != 10 {
		t.Fatalf("after an aborted Put: %d events, %v; want the earlier 10", len(got), err)
	}
}

func TestFilter(t *testing.T) {
	evs := testEvents(10)
	cases := []struct {
		name string
		q    store.RangeQuery
		want []int
	}{
		{"all", store.RangeQuery{}, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{"after and through", store.RangeQuery{After: evs[2].ID, Through: evs[4].ID}, []int{3, 4}},
		{"through", store.RangeQuery{Through: evs[1].ID}, []int{0, 1}},
		{"limit", store.RangeQuery{Limit: 2}, []int{0, 1}},
		{"reverse limit", store.RangeQuery{Reverse: true, Limit: 3}, []int{9, 8, 7}},
	}
	for _, tc := range cases {
		got := archive.Filter(evs, tc.q)
		var idx []int
		for _, e := range got {
			for i := range evs {
				if evs[i].ID == e.ID {
					idx = append(idx, i)
				}
			}
		}
		if diff := cmp.Diff(tc.want, idx); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustWrite(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
