package retention_test

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"testing"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob" // the raw handle on the test bucket

	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/s3test"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/retention"
	"github.com/nqd-dev/nqd/store"
)

// s3Archive opens an archive in a fresh bucket of a real S3-compatible
// server, and a raw handle on the same bucket.
func s3Archive(t *testing.T) (*s3test.Server, *archive.Bucket, *blob.Bucket) {
	t.Helper()
	srv := s3test.Start(t)
	u := srv.Bucket(t, "runs")
	arch, err := archive.Open(t.Context(), u, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { arch.Close() })
	raw, err := blob.OpenBucket(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	return srv, arch, raw
}

// TestSweepWaitsForAnUnreachableBucket takes the bucket's server down during
// a sweep: nothing is deleted, and the next sweep after it is back archives
// and expires the run.
func TestSweepWaitsForAnUnreachableBucket(t *testing.T) {
	srv, arch, _ := s3Archive(t)
	clk := testkit.NewClock(t0)
	s := newTestStore(t, clk)
	r := retention.New(s, retention.Options{Archive: arch, Now: clk.Now, Logger: testkit.Logger(t)})
	runFlow(t, s, clk, "ok-1", store.RunCompleted, 2)
	before := readAll(t, s, "ok-1")
	clk.Add(8 * 24 * time.Hour)

	srv.Down()
	n, err := r.Sweep(t.Context())
	if n != 0 || err == nil {
		t.Fatalf("Sweep with the bucket down = %d, %v; want 0 and an error", n, err)
	}
	if got := readAll(t, s, "ok-1"); len(got) != len(before) {
		t.Fatalf("run has %d events after a sweep without its bucket, want %d", len(got), len(before))
	}

	srv.Up(t)
	if n, err := r.Sweep(t.Context()); n != 1 || err != nil {
		t.Fatalf("Sweep with the bucket back = %d, %v; want 1", n, err)
	}
	if len(readAll(t, s, "ok-1")) != 0 {
		t.Fatal("run still in the store")
	}
	if m, err := arch.Verify(t.Context(), store.Context{Type: "flow", ID: "ok-1"}); err != nil || m.Events != int64(len(before)) {
		t.Fatalf("archive after the retry: %+v, %v; want %d events", m, err, len(before))
	}
}

// TestSweepKeepsRunWhenUploadIsCutOff loses every upload's connection
// part-way: no object of the run shows in the bucket and the run stays.
func TestSweepKeepsRunWhenUploadIsCutOff(t *testing.T) {
	srv, arch, raw := s3Archive(t)
	clk := testkit.NewClock(t0)
	s := newTestStore(t, clk)
	r := retention.New(s, retention.Options{Archive: arch, Now: clk.Now, Logger: testkit.Logger(t)})
	runFlow(t, s, clk, "ok-1", store.RunCompleted, 50)
	clk.Add(8 * 24 * time.Hour)

	srv.CutUploads(64)
	if n, err := r.Sweep(t.Context()); n != 0 || err == nil {
		t.Fatalf("Sweep with uploads cut off = %d, %v; want 0 and an error", n, err)
	}
	if srv.Cuts() == 0 {
		t.Fatal("no upload was cut off")
	}
	for _, key := range []string{"flow/ok-1.ndjson.gz", "flow/ok-1.manifest.json"} {
		if ok, err := raw.Exists(t.Context(), key); ok || err != nil {
			t.Errorf("object %s after a cut-off upload: exists %t, %v", key, ok, err)
		}
	}
	if len(readAll(t, s, "ok-1")) == 0 {
		t.Fatal("run deleted although its upload was cut off")
	}
	srv.CutUploads(0)
	if n, err := r.Sweep(t.Context()); n != 1 || err != nil {
		t.Fatalf("Sweep with uploads through = %d, %v; want 1", n, err)
	}
}

// damagingArchive writes the archive, then damages its events in the
// bucket, as a faulty store or a concurrent writer could.
type damagingArchive struct {
	*archive.Bucket
	raw *blob.Bucket
}

func (d damagingArchive) Put(ctx context.Context, c store.Context, record json.RawMessage, events iter.Seq2[event.Event, error]) (archive.Manifest, error) {
	m, err := d.Bucket.Put(ctx, c, record, events)
	if err != nil {
		return m, err
	}
	return m, d.raw.WriteAll(ctx, c.Type+"/"+c.ID+".ndjson.gz", []byte("damaged"), &blob.WriterOptions{ContentType: "application/gzip"})
}

// TestSweepDeletesOnlyVerifiedArchives: an archive that does not read back
// as written keeps the run in the store.
func TestSweepDeletesOnlyVerifiedArchives(t *testing.T) {
	_, arch, raw := s3Archive(t)
	clk := testkit.NewClock(t0)
	s := newTestStore(t, clk)
	r := retention.New(s, retention.Options{Archive: damagingArchive{arch, raw}, Now: clk.Now, Logger: testkit.Logger(t)})
	runFlow(t, s, clk, "ok-1", store.RunCompleted, 1)
	clk.Add(8 * 24 * time.Hour)
	if n, err := r.Sweep(t.Context()); n != 0 || !errors.Is(err, archive.ErrCorrupt) {
		t.Fatalf("Sweep = %d, %v; want 0 and ErrCorrupt", n, err)
	}
	if len(readAll(t, s, "ok-1")) == 0 {
		t.Fatal("run deleted although its archive does not verify")
	}
}
