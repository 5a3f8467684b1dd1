package storetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// CheckpointStore is a backend that keeps checkpoints.
type CheckpointStore interface {
	store.Store
	store.Checkpointer
}

// testCheckpoints checks store.Checkpointer: the nearest checkpoint at or
// before a bound, replacement at the same id, the limit that drops the
// oldest, and the scoping to one context.
func testCheckpoints(t *testing.T, s CheckpointStore) {
	ctx := t.Context()
	c := store.Context{Type: "flow", ID: "cp-run"}
	other := store.Context{Type: "flow", ID: "cp-other"}
	ids := mustAppend(t, s, c, evs(c, "log", 0, 40))
	mustAppend(t, s, other, evs(other, "log", 0, 1))

	if _, _, err := s.Checkpoint(ctx, c, event.MaxID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Checkpoint before any put: got %v, want ErrNotFound", err)
	}
	put := func(i int, state string) {
		t.Helper()
		if err := s.PutCheckpoint(ctx, c, ids[i].ID, []byte(state)); err != nil {
			t.Fatalf("PutCheckpoint(%s): %v", ids[i].ID, err)
		}
	}
	want := func(bound event.ID, wantAt event.ID, wantState string) {
		t.Helper()
		at, state, err := s.Checkpoint(ctx, c, bound)
		if err != nil {
			t.Fatalf("Checkpoint(%s): %v", bound, err)
		}
		if at != wantAt || string(state) != wantState {
			t.Fatalf("Checkpoint(%s) = %s %q, want %s %q", bound, at, state, wantAt, wantState)
		}
	}
	put(10, "ten")
	put(20, "twenty\x00binary")
	want(event.MaxID, ids[20].ID, "twenty\x00binary")
	want(ids[20].ID, ids[20].ID, "twenty\x00binary")
	want(ids[19].ID, ids[10].ID, "ten")
	want(ids[10].ID, ids[10].ID, "ten")
	if _, _, err := s.Checkpoint(ctx, c, ids[9].ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Checkpoint before the oldest: got %v, want ErrNotFound", err)
	}
	if _, _, err := s.Checkpoint(ctx, other, event.MaxID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another context's checkpoint: got %v, want ErrNotFound", err)
	}

	put(10, "ten again")
	want(ids[15].ID, ids[10].ID, "ten again")

	// Later checkpoints push the oldest out; the newest always stays.
	for i := 21; i < 40; i++ {
		put(i, fmt.Sprint(i))
	}
	want(event.MaxID, ids[39].ID, "39")
	want(ids[38].ID, ids[38].ID, "38")
	if _, _, err := s.Checkpoint(ctx, c, ids[15].ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the oldest checkpoint of 21 is still there: %v", err)
	}

	bad := store.Context{Type: "Flow!", ID: "x"}
	if err := s.PutCheckpoint(ctx, bad, ids[0].ID, nil); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("PutCheckpoint on a bad context: got %v, want ErrInvalid", err)
	}
	if _, _, err := s.Checkpoint(ctx, bad, event.MaxID); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Checkpoint on a bad context: got %v, want ErrInvalid", err)
	}
	if err := s.PutCheckpoint(ctx, c, event.ID{}, []byte("x")); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("PutCheckpoint at the zero id: got %v, want ErrInvalid", err)
	}
}
