package engine_test

import (
	"errors"
	"testing"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/internal/pgtest"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/store"
)

// TestDefinitionChangeSeenByOtherInstance: an instance decides its starts on
// its cached copy of a definition, yet a definition changed or deleted
// through another instance is what its very next start uses. Both stores
// that check definitions in the update itself are tested: two instances,
// two stores on one server.
func TestDefinitionChangeSeenByOtherInstance(t *testing.T) {
	pairs := []struct {
		name string
		open func(t *testing.T) (a, b engine.Store)
	}{
		{"redis", func(t *testing.T) (engine.Store, engine.Store) {
			prefix := redistest.Prefix(t)
			return newRedisStoreAt(t, prefix), newRedisStoreAt(t, prefix)
		}},
		{"postgres", func(t *testing.T) (engine.Store, engine.Store) {
			url := pgtest.URL(t)
			return newPGStoreAt(t, url), newPGStoreAt(t, url)
		}},
	}
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			stA, stB := p.open(t)
			testDefinitionChangeSeen(t, stA, stB)
		})
	}
}

func testDefinitionChangeSeen(t *testing.T, stA, stB engine.Store) {
	ctx := t.Context()
	for _, st := range []engine.Store{stA, stB} {
		if c, ok := st.(interface{ ChecksDefinitions() bool }); !ok || !c.ChecksDefinitions() {
			t.Fatalf("%T does not check definitions in its updates", st)
		}
	}
	a := engine.New(stA, engine.Options{})
	b := engine.New(stB, engine.Options{})
	start := func(wantStep string, wantSteps int) {
		t.Helper()
		s, err := b.Start(ctx, "f", nil, "")
		if err != nil || s.Step != wantStep {
			t.Fatalf("Start = %+v, %v; want entry step %s", s, err, wantStep)
		}
		m, err := stA.RunMeta(ctx, "f", s.FlowID)
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
