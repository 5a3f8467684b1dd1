package engine_test

import (
	"errors"
	"testing"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/store"
)

// TestDefinitionChangeSeenByOtherInstance: an instance decides its starts on
// its cached copy of a definition, yet a definition changed or deleted
// through another instance is what its very next start uses.
func TestDefinitionChangeSeenByOtherInstance(t *testing.T) {
	ctx := t.Context()
	prefix := redistest.Prefix(t)
	st := newRedisStoreAt(t, prefix)
	a := engine.New(st, engine.Options{})
	b := engine.New(newRedisStoreAt(t, prefix), engine.Options{})
	start := func(wantStep string, wantSteps int) {
		t.Helper()
		s, err := b.Start(ctx, "f", nil, "")
		if err != nil || s.Step != wantStep {
			t.Fatalf("Start = %+v, %v; want entry step %s", s, err, wantStep)
		}
		m, err := st.RunMeta(ctx, "f", s.FlowID)
		if err != nil || m.StepCount != wantSteps {
			t.Fatalf("run %s = %+v, %v; want %d steps", s.FlowID, m, err, wantSteps)
		}
	}

	mustDefine(t, a, "f", "diamond")
	start("start", 4)
	start("start", 4) // decided on b's cached copy
	mustDefine(t, a, "f", "example-flow")
	start("fetch_data", 3)
	start("fetch_data", 3)
	mustDefine(t, a, "f", "diamond")
	start("start", 4)

	if err := a.DeleteDefinition(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	if s, err := b.Start(ctx, "f", nil, ""); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Start of a deleted flow = %+v, %v; want ErrNotFound", s, err)
	}
}
