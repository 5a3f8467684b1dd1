package snapshots_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/reducers"
	"github.com/nqd-dev/nqd/snapshots"
	"github.com/nqd-dev/nqd/store"
)

func mustState(t *testing.T, c *snapshots.Cache, sc store.Context) reducers.State {
	t.Helper()
	s, err := c.State(t.Context(), sc)
	if err != nil {
		t.Fatalf("State(%s): %v", sc, err)
	}
	return s
}

func flowEvent(kind, data string) event.Event {
	return event.Event{Kind: kind, Subject: "x", Data: json.RawMessage(data)}
}

func TestTTLByStatus(t *testing.T) {
	st := newBoltStore(t)
	clock := testkit.NewClock(time.Unix(1e9, 0))
	cache := newCache(t, st, snapshots.Options{
		TTL: snapshots.TTL{Active: time.Hour, Completed: 2 * time.Hour, Failed: 3 * time.Hour},
		Now: clock.Now,
	})
	running := store.Context{Type: "flow", ID: "running"}
	done := store.Context{Type: "flow", ID: "done"}
	failed := store.Context{Type: "flow", ID: "failed"}
	mustAppend(t, st, running, []event.Event{flowEvent("flow.started", `{}`)})
	mustAppend(t, st, done, []event.Event{flowEvent("flow.started", `{}`), flowEvent("flow.completed", `{}`)})
	mustAppend(t, st, failed, []event.Event{flowEvent("flow.started", `{}`), flowEvent("flow.failed", `{"error":"x"}`)})
	for _, c := range []store.Context{running, done, failed} {
		mustState(t, cache, c)
	}

	// Expired entries are misses; live ones hits.
	steps := []struct {
		after            time.Duration
		expired, reading store.Context
	}{
		{90 * time.Minute, running, running},
		{60 * time.Minute, done, done},
		{60 * time.Minute, failed, failed},
	}
	for _, s := range steps {
		clock.Add(s.after)
		before := cache.Stats()
		mustState(t, cache, s.reading)
		after := cache.Stats()
		if after.Expirations != before.Expirations+1 || after.Misses != before.Misses+1 {
			t.Errorf("%s after its TTL: %+v -> %+v, want one expiration and one miss", s.reading.ID, before, after)
		}
	}
	// The failed run, read again within its 3h, is a hit.
	before := cache.Stats().Hits
	mustState(t, cache, failed)
	if cache.Stats().Hits != before+1 {
		t.Error("a fresh entry was not a hit")
	}
}

func TestBoundedByBytesAndEntries(t *testing.T) {
	st := newBoltStore(t)
	rng := rand.New(rand.NewPCG(7, 8))
	var ctxs []store.Context
	for i := range 6 {
		c := store.Context{Type: "flow", ID: fmt.Sprintf("r%d", i)}
		mustAppend(t, st, c, randomEvents(rng, c, 60))
		ctxs = append(ctxs, c)
	}
	probe := newCache(t, st, snapshots.Options{})
	size := int64(reducers.ApproxSize(mustState(t, probe, ctxs[0])))

	byBytes := newCache(t, st, snapshots.Options{MaxBytes: 3 * size})
	byEntries := newCache(t, st, snapshots.Options{MaxEntries: 2})
	for _, c := range ctxs {
		mustState(t, byBytes, c)
		mustState(t, byEntries, c)
	}
	if s := byBytes.Stats(); s.Bytes > 3*size || s.Entries >= len(ctxs) || s.Evictions == 0 {
		t.Errorf("MaxBytes %d: %+v", 3*size, s)
	}
	if s := byEntries.Stats(); s.Entries != 2 || s.Evictions != uint64(len(ctxs)-2) {
		t.Errorf("MaxEntries 2: %+v", s)
	}
	// The newest contexts stayed.
	hits := byEntries.Stats().Hits
	mustState(t, byEntries, ctxs[len(ctxs)-1])
	if byEntries.Stats().Hits != hits+1 {
		t.Error("the most recently used context was evicted")
	}
}

// stalledCheckpoints is a store whose checkpoint writes wait until released.
type stalledCheckpoints struct {
	store.Store
	release chan struct{}
}

func (s stalledCheckpoints) PutCheckpoint(ctx context.Context, c store.Context, at event.ID, b []byte) error {
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.(store.Checkpointer).PutCheckpoint(ctx, c, at, b)
}

func (s stalledCheckpoints) Checkpoint(ctx context.Context, c store.Context, at event.ID) (event.ID, []byte, error) {
	return s.Store.(store.Checkpointer).Checkpoint(ctx, c, at)
}

// TestCheckpointsNeverBlockReads: with the checkpoint writer stuck, reads go
// on and the checkpoints that do not fit the queue are skipped.
func TestCheckpointsNeverBlockReads(t *testing.T) {
	st := stalledCheckpoints{Store: newBoltStore(t), release: make(chan struct{})}
	cache := newCache(t, st, snapshots.Options{CheckpointEvery: 1, CheckpointQueue: 2})
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range 20 {
		c := contexts[i%len(contexts)]
		mustAppend(t, st, c, randomEvents(rng, c, 2))
		mustState(t, cache, c)
	}
	if s := cache.Stats(); s.CheckpointsSkipped == 0 || s.CheckpointsWritten != 0 {
		t.Errorf("with the writer stuck: %+v", s)
	}
	close(st.release)
	if err := cache.Close(); err != nil {
		t.Fatal(err)
	}
	if s := cache.Stats(); s.CheckpointsWritten == 0 || s.CheckpointsFailed != 0 {
		t.Errorf("after release the queued checkpoints were not written: %+v", s)
	}
}

// TestBadCheckpointIsFoldedAround: a checkpoint that does not decode is
// counted and skipped, and the state is folded from the start.
func TestBadCheckpointIsFoldedAround(t *testing.T) {
	st := newBoltStore(t)
	c := contexts[0]
	mustAppend(t, st, c, randomEvents(rand.New(rand.NewPCG(11, 12)), c, 30))
	evs := stored(t, st, c)
	if err := st.(store.Checkpointer).PutCheckpoint(t.Context(), c, evs[20].ID, []byte(`{"v":0}`)); err != nil {
		t.Fatal(err)
	}
	cache := newCache(t, st, snapshots.Options{CheckpointEvery: snapshots.DefaultCheckpointEvery})
	wantFold(t, "State", c, mustState(t, cache, c), evs)
	if s := cache.Stats(); s.CheckpointsRejected != 1 || s.RebuildEvents != uint64(len(evs)) {
		t.Errorf("%+v, want one rejected checkpoint and a fold of all %d events", s, len(evs))
	}
}

// TestConcurrentAppendsAndReads: readers racing writers always see a true
// state, and once the writers stop, the whole stream.
func TestConcurrentAppendsAndReads(t *testing.T) {
	st := newBoltStore(t)
	cache := newCache(t, st, snapshots.Options{CheckpointEvery: 10, PageSize: 8})
	c := contexts[0]
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 13))
			for range 30 {
				if _, err := st.Append(context.Background(), c, randomEvents(rng, c, 1+rng.IntN(3)), store.AppendOptions{}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for range 3 {
		wg.Go(func() {
			for range 30 {
				s, err := cache.State(context.Background(), c)
				if err != nil {
					t.Error(err)
					return
				}
				if err := s.Validate(); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	wantFold(t, "State after the writers", c, mustState(t, cache, c), stored(t, st, c))
}
