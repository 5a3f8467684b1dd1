package archive_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

func TestDataByReference(t *testing.T) {
	eachBucket(t, func(t *testing.T, d testBucket) {
		ctx := t.Context()
		value := []byte(`{"rows":"` + strings.Repeat("r", 100_000) + `"}`)
		ref, err := d.PutData(ctx, "run-1", value)
		if err != nil {
			t.Fatal(err)
		}
		if ref.RunID != "run-1" || ref.Bytes != int64(len(value)) || len(ref.SHA256) != 64 {
			t.Fatalf("ref %+v", ref)
		}
		if again, err := d.PutData(ctx, "run-1", value); err != nil || again != ref {
			t.Fatalf("second PutData = %+v, %v; want the same reference", again, err)
		}
		for _, r := range []archive.Ref{ref, {RunID: ref.RunID, SHA256: ref.SHA256, Bytes: -1}} {
			if got, err := d.GetData(ctx, r); err != nil || string(got) != string(value) {
				t.Fatalf("GetData(%+v) = %d bytes, %v", r, len(got), err)
			}
		}
		if _, err := d.GetData(ctx, archive.Ref{RunID: "run-2", SHA256: ref.SHA256, Bytes: ref.Bytes}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("another run's value: %v, want ErrNotFound", err)
		}
		if _, err := d.GetData(ctx, archive.Ref{RunID: "../x", SHA256: ref.SHA256}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("a bad run id: %v, want ErrInvalid", err)
		}
		d.write(t, "_data/run-1/"+ref.SHA256, append(value[:len(value)-2], '}'))
		if _, err := d.GetData(ctx, ref); !errors.Is(err, archive.ErrCorrupt) {
			t.Errorf("a changed value: %v, want ErrCorrupt", err)
		}
		if st := d.Stats(); st.ObjectsWritten != 1 || st.BytesWritten != int64(len(value)) || st.Corrupt != 1 || st.ReadFailures != 0 || st.WriteFailures != 0 {
			t.Errorf("Stats = %+v; want one object of %d bytes written and one corrupt read", st, len(value))
		}
		// The data folder is not a context type.
		if types, err := d.Types(ctx); err != nil || len(types) != 0 {
			t.Errorf("Types = %v, %v; want none", types, err)
		}
	})
}

// TestDeleteData: a run's values go, unless an archive of the run refers
// to them; other runs' values stay.
func TestDeleteData(t *testing.T) {
	eachBucket(t, func(t *testing.T, d testBucket) {
		ctx := t.Context()
		put := func(run, v string) archive.Ref {
			ref, err := d.PutData(ctx, run, []byte(v))
			if err != nil {
				t.Fatal(err)
			}
			return ref
		}
		a1, a2, b, c := put("run-a", `"one"`), put("run-a", `"two"`), put("run-b", `"three"`), put("run-c", `"four"`)
		evs := []event.Event{{ID: event.ID{MS: 1}, Kind: "flow.started", Data: []byte(`{}`)}}
		if _, err := d.Put(ctx, store.Context{Type: "flow", ID: "run-c"}, nil, archive.Slice(evs)); err != nil {
			t.Fatal(err)
		}
		if n, err := d.DeleteData(ctx, "run-a"); n != 2 || err != nil {
			t.Fatalf("DeleteData(run-a) = %d, %v; want its 2 values", n, err)
		}
		if n, err := d.DeleteData(ctx, "run-c"); n != 0 || err != nil {
			t.Fatalf("DeleteData(run-c) = %d, %v; want none: its archive refers to them", n, err)
		}
		for _, ref := range []archive.Ref{a1, a2} {
			if _, err := d.GetData(ctx, ref); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("a deleted value: %v, want ErrNotFound", err)
			}
		}
		for _, ref := range []archive.Ref{b, c} {
			if _, err := d.GetData(ctx, ref); err != nil {
				t.Errorf("a value kept: %v", err)
			}
		}
		if _, err := d.DeleteData(ctx, "../x"); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("a bad run id: %v, want ErrInvalid", err)
		}
	})
}
