package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/s3test"
	"github.com/nqd-dev/nqd/store"
)

func TestVerifyReportsCorruptArchives(t *testing.T) {
	root := t.TempDir()
	a, err := archive.NewDir(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	evs := []event.Event{{ID: event.ID{MS: 1, Seq: 0}, Kind: "flow.started", Subject: "r"}}
	for _, id := range []string{"good", "bad"} {
		if _, err := a.Put(context.Background(), store.Context{Type: "flow", ID: id}, nil, archive.Slice(evs)); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"verify", root}, &out, &errOut); code != 0 {
		t.Fatalf("intact archives: exit %d, %s%s", code, out.String(), errOut.String())
	}
	data := filepath.Join(root, "flow", "bad.ndjson.gz")
	b, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-5] ^= 0xff
	if err := os.WriteFile(data, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run(context.Background(), []string{"verify", root}, &out, &errOut); code != 1 {
		t.Fatalf("corrupt archive: exit %d, want 1", code)
	}
	if !strings.Contains(out.String(), "CORRUPT flow:bad") || !strings.Contains(out.String(), "ok      flow:good") {
		t.Fatalf("output:\n%s", out.String())
	}
}

// TestVerifyBucket verifies archives and compaction segments in a bucket of
// a real S3-compatible server, by its URL.
func TestVerifyBucket(t *testing.T) {
	u := s3test.Start(t).Bucket(t, "archive")
	a, err := archive.Open(t.Context(), u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	evs := []event.Event{{ID: event.ID{MS: 1, Seq: 0}, Kind: "flow.started", Subject: "r"}, {ID: event.ID{MS: 2, Seq: 0}, Kind: "flow.completed", Subject: "r"}}
	c := store.Context{Type: "flow", ID: "done"}
	if _, err := a.Put(t.Context(), c, nil, archive.Slice(evs)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PutSegment(t.Context(), store.Context{Type: "flow", ID: "long"}, evs[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PutData(t.Context(), "done", []byte(`{"rows":42}`)); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"verify", u}, &out, &errOut); code != 0 {
		t.Fatalf("intact bucket: exit %d, %s%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{"ok      flow:done: 2 events", "ok      flow:long segment: 1 events", "ok      data done/"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
