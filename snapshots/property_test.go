package snapshots_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/reducers"
	"github.com/nqd-dev/nqd/snapshots"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
)

// backends runs f once per store backend, each on a fresh store.
func backends(t *testing.T, f func(t *testing.T, newStore func(t *testing.T) store.Store)) {
	t.Run("bolt", func(t *testing.T) {
		t.Parallel()
		f(t, newBoltStore)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		f(t, newRedisStore)
	})
}

func newBoltStore(t *testing.T) store.Store {
	t.Helper()
	return bolttest.Open(t, boltstore.Options{Logger: testkit.Logger(t)})
}

func newRedisStore(t *testing.T) store.Store { return backendtest.OpenRedis(t, "") }

func newCache(t *testing.T, st store.Store, opts snapshots.Options) *snapshots.Cache {
	t.Helper()
	opts.Logger = testkit.Logger(t)
	opts.Checkpoints, _ = st.(store.Checkpointer)
	c := snapshots.New(st, opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var contexts = []store.Context{
	{Type: "flow", ID: "run-1"},
	{Type: "flow", ID: "run-2"},
	{Type: "trigger", ID: "trg-1"},
	{Type: "job", ID: "job-1"},
}

// kinds and payloads of the random streams: enough of each reducer's kinds
// that folds change every part of their states.
var randomKinds = []struct {
	kind, data string
}{
	{"flow.started", `{"name":"f","input":{"n":%d}}`},
	{"step.started", `{}`},
	{"step.completed", `{"result":%d}`},
	{"step.failed", `{"error":"e%d","willRetry":true}`},
	{"step.retry", `{"nextAttempt":2}`},
	{"step.await.event", `{"eventKind":"k%d"}`},
	{"step.resumed", `{"reason":"ok"}`},
	{"log", `{"level":"info","msg":"m%d"}`},
	{"log", `{"level":"debug","msg":"m%d"}`},
	{"emit", `{"event":"e%d","payload":{"x":1}}`},
	{"state.set", `{"key":"k%d","value":%d}`},
	{"state.delete", `{"key":"k%d"}`},
	{"state.batch", `{"operations":[{"type":"set","key":"b%d","value":true},{"type":"delete","key":"k1"}]}`},
	{"flow.completed", `{"result":%d}`},
	{"trigger.registered", `{"type":"webhook","config":{"n":%d}}`},
	{"trigger.fired", `{"payload":{"n":%d},"source":"api"}`},
	{"something.else", `{"n":%d}`},
}

func randomEvents(rng *rand.Rand, c store.Context, n int) []event.Event {
	out := make([]event.Event, n)
	for i := range out {
		k := randomKinds[rng.IntN(len(randomKinds))]
		out[i] = event.Event{
			Kind: k.kind, Subject: c.ID, Step: fmt.Sprintf("s%d", rng.IntN(3)),
			Data: json.RawMessage(strings.ReplaceAll(k.data, "%d", strconv.Itoa(rng.IntN(5)))),
		}
	}
	return out
}

func mustAppend(t *testing.T, st store.Store, c store.Context, evs []event.Event) {
	t.Helper()
	if _, err := st.Append(t.Context(), c, evs, store.AppendOptions{}); err != nil {
		t.Fatalf("Append(%s): %v", c, err)
	}
}

// stored reads c's whole stream back: the events as the store gives them,
// ids included, are what every fold must agree with.
func stored(t *testing.T, st store.Store, c store.Context) []event.Event {
	t.Helper()
	evs, err := st.Range(t.Context(), c, store.RangeQuery{})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// checkpointOf is a state's complete encoding, bookkeeping included, so two
// states compare equal only if folding on from them gives equal states too.
func checkpointOf(t *testing.T, s reducers.State) string {
	t.Helper()
	b, err := reducers.MarshalCheckpoint(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func wantFold(t *testing.T, what string, c store.Context, got reducers.State, evs []event.Event) {
	t.Helper()
	want, err := reducers.Fold(reducers.For(c.Type), evs)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := checkpointOf(t, got), checkpointOf(t, want); g != w {
		t.Fatalf("%s of %s is not the fold of its %d events:\ngot  %s\nwant %s", what, c, len(evs), g, w)
	}
}

// TestStateAtIsFoldOfPrefix: state(at=e_i) equals the fold of events 0..i,
// whether the cache starts cold, holds a later state, or holds an earlier
// one, and with checkpoints in between.
func TestStateAtIsFoldOfPrefix(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		st := newStore(t)
		rng := rand.New(rand.NewPCG(1, 2))
		for _, c := range contexts {
			mustAppend(t, st, c, randomEvents(rng, c, 120))
		}
		warm := newCache(t, st, snapshots.Options{CheckpointEvery: 17, PageSize: 7})
		for _, c := range contexts {
			evs := stored(t, st, c)
			if _, err := warm.State(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			// Checkpoints written by the warm cache serve the cold ones.
			order := rng.Perm(len(evs))
			for _, i := range order[:40] {
				cold := newCache(t, st, snapshots.Options{CheckpointEvery: -1, PageSize: 5})
				for name, cache := range map[string]*snapshots.Cache{"warm": warm, "cold": cold} {
					got, err := cache.StateAt(t.Context(), c, evs[i].ID)
					if err != nil {
						t.Fatal(err)
					}
					wantFold(t, fmt.Sprintf("%s StateAt(e_%d)", name, i), c, got, evs[:i+1])
				}
			}
			got, err := warm.StateAt(t.Context(), c, event.ID{MS: evs[0].ID.MS - 1, Seq: ^uint64(0)})
			if err != nil {
				t.Fatal(err)
			}
			wantFold(t, "StateAt before the first event", c, got, nil)
		}
	})
}

// TestCacheEqualsFullFold interleaves appends and reads at random, with a
// cache small enough to evict, and checks every answer against a full fold.
func TestCacheEqualsFullFold(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		st := newStore(t)
		rng := rand.New(rand.NewPCG(3, 4))
		cache := newCache(t, st, snapshots.Options{MaxEntries: 2, CheckpointEvery: 9, PageSize: 4})
		for step := range 300 {
			c := contexts[rng.IntN(len(contexts))]
			switch rng.IntN(4) {
			case 0, 1:
				mustAppend(t, st, c, randomEvents(rng, c, 1+rng.IntN(6)))
			case 2:
				got, err := cache.State(t.Context(), c)
				if err != nil {
					t.Fatal(err)
				}
				wantFold(t, fmt.Sprintf("step %d: State", step), c, got, stored(t, st, c))
			case 3:
				evs := stored(t, st, c)
				if len(evs) == 0 {
					continue
				}
				i := rng.IntN(len(evs))
				got, err := cache.StateAt(t.Context(), c, evs[i].ID)
				if err != nil {
					t.Fatal(err)
				}
				wantFold(t, fmt.Sprintf("step %d: StateAt(e_%d)", step, i), c, got, evs[:i+1])
			}
		}
		s := cache.Stats()
		if s.Hits == 0 || s.Misses == 0 || s.Evictions == 0 || s.TailEvents == 0 {
			t.Errorf("the run did not exercise hits, misses, evictions and tails: %+v", s)
		}
		if s.Entries > 2 {
			t.Errorf("%d entries cached, MaxEntries is 2", s.Entries)
		}
	})
}

// TestCheckpointPlusTail: a cold cache over a store with checkpoints folds
// only the events after the newest one, and gets the full fold.
func TestCheckpointPlusTail(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		st := newStore(t)
		rng := rand.New(rand.NewPCG(5, 6))
		c := contexts[0]
		writer := newCache(t, st, snapshots.Options{CheckpointEvery: 50})
		for range 10 {
			mustAppend(t, st, c, randomEvents(rng, c, 23))
			if _, err := writer.State(t.Context(), c); err != nil {
				t.Fatal(err)
			}
		}
		// Close waits for the queued checkpoints.
		if err := writer.Close(); err != nil {
			t.Fatal(err)
		}
		if w := writer.Stats().CheckpointsWritten; w < 4 {
			t.Fatalf("%d checkpoints written over 230 events, want one per 50", w)
		}
		mustAppend(t, st, c, randomEvents(rng, c, 7))
		evs := stored(t, st, c)

		cold := newCache(t, st, snapshots.Options{CheckpointEvery: snapshots.DefaultCheckpointEvery})
		got, err := cold.State(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		wantFold(t, "checkpoint + tail", c, got, evs)
		cpAt, _, err := st.(store.Checkpointer).Checkpoint(t.Context(), c, event.MaxID)
		if err != nil {
			t.Fatal(err)
		}
		tail := 0
		for _, e := range evs {
			if e.ID.Compare(cpAt) > 0 {
				tail++
			}
		}
		if s := cold.Stats(); s.Misses != 1 || s.RebuildEvents != uint64(tail) || tail > 50+7 {
			t.Errorf("cold rebuild folded %d events (%d misses); the tail after the checkpoint at %s is %d of %d",
				s.RebuildEvents, s.Misses, cpAt, tail, len(evs))
		}
	})
}
