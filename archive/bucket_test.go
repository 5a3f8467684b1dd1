package archive_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // the raw handles of the tests' buckets
	_ "gocloud.dev/blob/s3blob"

	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/s3test"
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

// testBucket is an archive and a raw handle on the bucket under it, for a
// test to damage objects with.
type testBucket struct {
	*archive.Bucket
	raw *blob.Bucket
}

func (b testBucket) read(t *testing.T, key string) []byte {
	t.Helper()
	body, err := b.raw.ReadAll(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func (b testBucket) write(t *testing.T, key string, body []byte) {
	t.Helper()
	if err := b.raw.WriteAll(t.Context(), key, body, &blob.WriterOptions{ContentType: "application/octet-stream"}); err != nil {
		t.Fatal(err)
	}
}

// eachBucket runs test against a directory and against a bucket of a real
// S3-compatible server.
func eachBucket(t *testing.T, test func(t *testing.T, b testBucket)) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	now := func() time.Time { return at }
	t.Run("file", func(t *testing.T) {
		root := t.TempDir()
		test(t, openTestBucket(t, "file://"+root, "file://"+root+"?metadata=skip&no_tmp_dir=1", now))
	})
	t.Run("s3", func(t *testing.T) {
		u := s3test.Start(t).Bucket(t, "archive")
		test(t, openTestBucket(t, u, u, now))
	})
}

func openTestBucket(t *testing.T, archiveURL, rawURL string, now func() time.Time) testBucket {
	t.Helper()
	a, err := archive.Open(t.Context(), archiveURL, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	raw, err := blob.OpenBucket(t.Context(), rawURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	return testBucket{Bucket: a, raw: raw}
}

func TestPutGetRoundTrip(t *testing.T) { eachBucket(t, testPutGetRoundTrip) }

func testPutGetRoundTrip(t *testing.T, d testBucket) {
	ctx := t.Context()
	evs := testEvents(2500)
	record := json.RawMessage(`{"flow":"pipeline","run":"run-1","status":"completed"}`)
	m, err := d.Put(ctx, run, record, archive.Slice(evs))
	if err != nil {
		t.Fatal(err)
	}
	if m.Events != 2500 || m.FirstID != evs[0].ID.String() || m.LastID != evs[2499].ID.String() || len(m.SHA256) != 64 {
		t.Fatalf("manifest %+v", m)
	}
	for _, key := range []string{"flow/run-1.ndjson.gz", "flow/run-1.manifest.json"} {
		if ok, err := d.raw.Exists(ctx, key); !ok || err != nil {
			t.Errorf("object %s: %t, %v", key, ok, err)
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
	eachBucket(t, func(t *testing.T, d testBucket) {
		if _, _, err := d.Get(context.Background(), run); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("got %v, want ErrNotFound", err)
		}
		if _, err := d.Verify(context.Background(), store.Context{Type: "flow", ID: ".."}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("got %v, want ErrInvalid", err)
		}
	})
}

func TestVerifyDetectsCorruption(t *testing.T) {
	const data, manifest = "flow/run-1.ndjson.gz", "flow/run-1.manifest.json"
	cases := map[string]func(t *testing.T, b testBucket){
		"flipped byte": func(t *testing.T, b testBucket) {
			body := b.read(t, data)
			body[len(body)/2] ^= 0x01
			b.write(t, data, body)
		},
		"truncated": func(t *testing.T, b testBucket) {
			body := b.read(t, data)
			b.write(t, data, body[:len(body)-10])
		},
		"appended bytes": func(t *testing.T, b testBucket) {
			b.write(t, data, append(b.read(t, data), 0, 0, 0))
		},
		"events object gone": func(t *testing.T, b testBucket) {
			if err := b.raw.Delete(t.Context(), data); err != nil {
				t.Fatal(err)
			}
		},
		"manifest count changed": func(t *testing.T, b testBucket) {
			var m archive.Manifest
			if err := json.Unmarshal(b.read(t, manifest), &m); err != nil {
				t.Fatal(err)
			}
			m.Events--
			body, _ := json.Marshal(m)
			b.write(t, manifest, body)
		},
		"manifest garbage": func(t *testing.T, b testBucket) {
			b.write(t, manifest, []byte("{"))
		},
	}
	eachBucket(t, func(t *testing.T, d testBucket) {
		ctx := t.Context()
		for name, corrupt := range cases {
			t.Run(name, func(t *testing.T) {
				if _, err := d.Put(ctx, run, nil, archive.Slice(testEvents(300))); err != nil {
					t.Fatal(err)
				}
				if _, err := d.Verify(ctx, run); err != nil {
					t.Fatalf("intact archive: %v", err)
				}
				corrupt(t, d)
				if _, err := d.Verify(ctx, run); !errors.Is(err, archive.ErrCorrupt) {
					t.Fatalf("Verify = %v, want ErrCorrupt", err)
				}
				if _, evs, err := d.Get(ctx, run); !errors.Is(err, archive.ErrCorrupt) || evs != nil {
					t.Fatalf("Get = %d events, %v; want none and ErrCorrupt", len(evs), err)
				}
			})
		}
	})
}

func TestPutAbortKeepsEarlierArchive(t *testing.T) {
	eachBucket(t, func(t *testing.T, d testBucket) {
		ctx := t.Context()
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
	})
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
