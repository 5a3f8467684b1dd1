package archive_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"gocloud.dev/blob"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

func TestSegments(t *testing.T) { eachBucket(t, testSegments) }

func testSegments(t *testing.T, d testBucket) {
	ctx := t.Context()
	evs := testEvents(30)
	if segs, err := d.Segments(ctx, run); err != nil || len(segs) != 0 {
		t.Fatalf("Segments before any = %v, %v; want none", segs, err)
	}
	// Written out of order, listed in id order.
	for _, part := range [][]event.Event{evs[10:30], evs[0:10]} {
		if _, err := d.PutSegment(ctx, run, part); err != nil {
			t.Fatalf("PutSegment: %v", err)
		}
	}
	segs, err := d.Segments(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	want := []archive.SegmentRef{{FirstID: evs[0].ID, LastID: evs[9].ID}, {FirstID: evs[10].ID, LastID: evs[29].ID}}
	if d := cmp.Diff(want, segs); d != "" {
		t.Fatalf("Segments (-want +got):\n%s", d)
	}
	var got []string
	if _, err := d.ReadSegment(ctx, run, segs[1], func(e event.Event) bool {
		got = append(got, e.ID.String())
		return len(got) < 5
	}); err != nil {
		t.Fatalf("ReadSegment: %v", err)
	}
	if len(got) != 5 || got[0] != evs[10].ID.String() {
		t.Errorf("ReadSegment stopped early read %v, want 5 from %s", got, evs[10].ID)
	}
	m, err := d.VerifySegment(ctx, run, segs[0])
	if err != nil || m.Events != 10 {
		t.Errorf("VerifySegment = %+v, %v; want 10 events", m, err)
	}
	// Segments do not show as whole-run archives.
	if list, err := d.List(ctx, run.Type); err != nil || len(list) != 0 {
		t.Errorf("List with only segments = %v, %v; want none", list, err)
	}

	it := d.raw.List(&blob.ListOptions{Prefix: run.Type + "/" + run.ID + "/"})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(obj.Key, ".gz") {
			d.write(t, obj.Key, []byte("damaged"))
		}
	}
	if _, err := d.VerifySegment(ctx, run, segs[0]); !errors.Is(err, archive.ErrCorrupt) {
		t.Errorf("VerifySegment of a damaged segment: got %v, want ErrCorrupt", err)
	}
	if _, err := d.PutSegment(ctx, run, nil); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("PutSegment without events: got %v, want ErrInvalid", err)
	}
	if _, err := d.PutSegment(ctx, run, []event.Event{evs[3], evs[2]}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("PutSegment out of order: got %v, want ErrInvalid", err)
	}
}
