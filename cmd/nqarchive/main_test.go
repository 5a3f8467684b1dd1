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
