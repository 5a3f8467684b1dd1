package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/internal/backendtest"
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
	forEachCheckingPair(t, testDefinitionChangeSeen)
}

// forEachCheckingPair runs f with two stores on one server, for each backend
// that checks definitions in the update itself.
func forEachCheckingPair(t *testing.T, f func(t *testing.T, a, b engine.Store)) {
	pairs := []struct {
		name string
		open func(t *testing.T) (a, b engine.Store)
	}{
		{"redis", func(t *testing.T) (engine.Store, engine.Store) {
			prefix := redistest.Prefix(t)
			return backendtest.OpenRedis(t, prefix), backendtest.OpenRedis(t, prefix)
		}},
		{"postgres", func(t *testing.T) (engine.Store, engine.Store) {
			url := pgtest.URL(t)
			return backendtest.OpenPostgres(t, url), backendtest.OpenPostgres(t, url)
		}},
	}
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			stA, stB := p.open(t)
			f(t, stA, stB)
		})
	}
}

func testDefinitionChangeSeen(t *testing.T, stA, stB engine.Store) {
	ctx := t.Context()
	for _, st := range []engine.Store{stA, stB} {
		if !st.Features().ChecksDefinitions {
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

// definitionReads counts the reads of definitions from a store that checks
// them in its updates.
type definitionReads struct {
	engine.Store
	n atomic.Int64
}

func (s *definitionReads) Definition(ctx context.Context, name string) ([]byte, error) {
	s.n.Add(1)
	return s.Store.Definition(ctx, name)
}

// Features are the store's ability to check definitions, and nothing else.
func (s *definitionReads) Features() store.Features {
	return store.Features{ChecksDefinitions: s.Store.Features().ChecksDefinitions}
}

// An emit is decided on the instance's cached definition without reading
// it, yet when another instance changed the definition meanwhile, the step
// the emit makes ready is the stored definition's.
func TestEmitSeesDefinitionChangedElsewhere(t *testing.T) {
	forEachCheckingPair(t, func(t *testing.T, stA, stB engine.Store) {
		ctx := t.Context()
		reads := &definitionReads{Store: stB}
		a, b := engine.New(stA, engine.Options{}), engine.New(reads, engine.Options{})
		define := func(next string) {
			t.Helper()
			body := `{"entry": "start", "steps": {
				"start": {"queue": "default", "emits": ["go"]},
				"` + next + `": {"queue": "default", "subscribes": ["go"]}}}`
			d, err := flows.Parse([]byte(body), false, "f")
			if err != nil {
				t.Fatal(err)
			}
			if err := a.PutDefinition(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		// emit starts a run on b, claims its first job there, runs
		// between, and emits from the job; it answers the step the emit
		// queued.
		emit := func(between func()) string {
			t.Helper()
			s, err := b.Start(ctx, "f", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			jobs, err := b.Claim(ctx, []string{"default"}, 1, 0)
			if err != nil || len(jobs) != 1 || jobs[0].ID != s.ID {
				t.Fatalf("Claim = %+v, %v; want the job %s", jobs, err, s.ID)
			}
			between()
			ack := store.JobAck{Queue: "default", ID: s.ID, Lease: jobs[0].Lease}
			if _, err := b.Report(ctx, ack, []event.Event{{Kind: "emit", Data: json.RawMessage(`{"event":"go"}`)}}, ""); err != nil {
				t.Fatal(err)
			}
			if err := b.Complete(ctx, ack, nil); err != nil {
				t.Fatal(err)
			}
			next, err := a.Claim(ctx, []string{"default"}, 1, 0)
			if err != nil || len(next) != 1 || next[0].RunID != s.FlowID {
				t.Fatalf("Claim after the emit = %+v, %v; want a job of run %s", next, err, s.FlowID)
			}
			return next[0].Step
		}

		nothing := func() {}
		define("one")
		if got := emit(nothing); got != "one" {
			t.Fatalf("the emit queued %s; want one", got)
		}
		before := reads.n.Load()
		if got := emit(nothing); got != "one" {
			t.Fatalf("the emit queued %s; want one", got)
		}
		if n := reads.n.Load() - before; n != 0 {
			t.Errorf("a start and an emit on a cached definition read it %d times; want none", n)
		}
		// Changed after the start, so the emit is the first decision on
		// b's stale copy.
		if got := emit(func() { define("two") }); got != "two" {
			t.Fatalf("after the definition changed elsewhere the emit queued %s; want two", got)
		}
	})
}
