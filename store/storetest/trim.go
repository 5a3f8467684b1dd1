package storetest

import (
	"errors"
	"testing"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// TrimStore is what compaction needs of a backend.
type TrimStore interface {
	store.Store
	store.Trimmer
}

// runTrim checks store.Trimmer against stores from newStore (see runStore).
func runTrim(t *testing.T, newStore func(t *testing.T) TrimStore) {
	t.Run("TrimBelow", func(t *testing.T) { testTrimBelow(t, newStore(t)) })
	t.Run("TrimKeepsNewest", func(t *testing.T) { testTrimKeepsNewest(t, newStore(t)) })
	t.Run("TrimInvalid", func(t *testing.T) { testTrimInvalid(t, newStore(t)) })
}

// testTrimBelow trims part of a stream: the rest reads as before, Info counts
// only it, another context is untouched, and a second trim is a no-op.
func testTrimBelow(t *testing.T, s TrimStore) {
	ctx := t.Context()
	c := store.Context{Type: "flow", ID: "trim-run"}
	other := store.Context{Type: "flow", ID: "trim-other"}
	all := mustAppend(t, s, c, evs(c, "log", 0, 30))
	mustAppend(t, s, other, evs(other, "log", 0, 5))

	n, err := s.Trim(ctx, c, all[10].ID)
	if err != nil {
		t.Fatalf("Trim: %v", err)
	}
	if n != 10 {
		t.Errorf("Trim removed %d, want 10", n)
	}
	diffEvents(t, "Range after Trim", all[10:], mustRange(t, s, c, store.RangeQuery{}))
	info := mustInfo(t, s, c)
	if info.Length != 20 || info.FirstID != all[10].ID || info.LastID != all[29].ID {
		t.Errorf("Info after Trim = %+v, want length 20 from %s to %s", info, all[10].ID, all[29].ID)
	}
	if got := mustInfo(t, s, other).Length; got != 5 {
		t.Errorf("other context's length = %d, want 5", got)
	}
	if n, err := s.Trim(ctx, c, all[10].ID); err != nil || n != 0 {
		t.Errorf("second Trim = %d, %v; want 0, nil", n, err)
	}
	more := mustAppend(t, s, c, evs(c, "log", 30, 1))
	if more[0].ID.Compare(all[29].ID) <= 0 {
		t.Errorf("append after Trim got id %s, not after %s", more[0].ID, all[29].ID)
	}
}

// testTrimKeepsNewest trims past the end: the newest event stays, so ids keep
// increasing and the context stays listed.
func testTrimKeepsNewest(t *testing.T, s TrimStore) {
	ctx := t.Context()
	c := store.Context{Type: "flow", ID: "trim-all"}
	all := mustAppend(t, s, c, evs(c, "log", 0, 8))
	n, err := s.Trim(ctx, c, event.MaxID)
	if err != nil {
		t.Fatalf("Trim: %v", err)
	}
	if n != 7 {
		t.Errorf("Trim removed %d, want 7", n)
	}
	diffEvents(t, "Range after Trim", all[7:], mustRange(t, s, c, store.RangeQuery{}))
	if info := mustInfo(t, s, c); info.Length != 1 {
		t.Errorf("Info after Trim = %+v, want length 1", info)
	}
	if !hasMember(mustIndexList(t, s, store.Index{Type: "flow"}, 0, 100), c.ID) {
		t.Errorf("context left its index after Trim")
	}
	more := mustAppend(t, s, c, evs(c, "log", 8, 1))
	if more[0].ID.Compare(all[7].ID) <= 0 {
		t.Errorf("append after Trim got id %s, not after %s", more[0].ID, all[7].ID)
	}
	if n, err := s.Trim(ctx, store.Context{Type: "flow", ID: "trim-none"}, event.MaxID); err != nil || n != 0 {
		t.Errorf("Trim of an empty context = %d, %v; want 0, nil", n, err)
	}
}

func testTrimInvalid(t *testing.T, s TrimStore) {
	ctx := t.Context()
	if _, err := s.Trim(ctx, store.Context{Type: "Bad Type", ID: "x"}, event.MaxID); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Trim of a bad context: got %v, want ErrInvalid", err)
	}
	if _, err := s.Trim(ctx, store.Context{Type: "flow", ID: "x"}, event.ID{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Trim before the zero id: got %v, want ErrInvalid", err)
	}
}
