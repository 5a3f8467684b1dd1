package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/redisstore"
)

// TestShardsSpreadRunsOverSlots: with nine shards on a cluster of three
// primaries, the keys of different runs land in different slots and on
// every primary, while each run's keys (stream, record, status index
// entry, job, timer) share one slot, as the scripts that write them
// together need.
func TestShardsSpreadRunsOverSlots(t *testing.T) {
	ctx := t.Context()
	client := redistest.ClusterClient(t)
	prefix := redistest.ClusterPrefix(t)
	s, err := redisstore.New(client, redisstore.Options{Prefix: prefix, Shards: 9, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.CheckShards(ctx); err != nil {
		t.Fatal(err)
	}
	const runs = 40
	for i := range runs {
		run := fmt.Sprintf("run-%d", i)
		_, err := s.UpdateRun(ctx, store.RunUpdate{
			Meta:      store.RunMeta{FlowName: "f", RunID: run, Status: store.RunRunning, StartedAt: 1000},
			Events:    []event.Event{{Kind: "flow.started", Subject: run, RunID: run, FlowName: "f"}},
			Enqueue:   []store.Job{{ID: store.JobID(run, "a"), Queue: "q", FlowName: "f", RunID: run, Step: "a", ReadyAt: 1}},
			SetTimers: []store.Timer{{Kind: "retry", FlowName: "f", RunID: run, Step: "a", Due: 1 << 50}},
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	// Every key of the prefix, by the slot the cluster puts it in.
	slotOfRun := map[string]int64{}
	primaries := map[string]bool{}
	keys := 0
	var mu sync.Mutex // ForEachMaster visits the primaries at once
	err = client.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		it := node.Scan(ctx, 0, "{"+prefix+":*", 1000).Iterator()
		for it.Next(ctx) {
			key := it.Val()
			slot, err := node.ClusterKeySlot(ctx, key).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			primaries[node.Options().Addr] = true
			keys++
			for i := range runs {
				run := fmt.Sprintf("run-%d", i)
				if have, ok := slotOfRun[run]; ok && have != slot && strings.HasSuffix(key, ":"+run) {
					err = fmt.Errorf("the keys of %s are in slots %d and %d (%s)", run, have, slot, key)
				}
				if strings.HasSuffix(key, ":"+run) {
					slotOfRun[run] = slot
				}
			}
			mu.Unlock()
			if err != nil {
				return err
			}
		}
		return it.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	slotsUsed := map[int64]bool{}
	for _, slot := range slotOfRun {
		slotsUsed[slot] = true
	}
	if len(slotOfRun) != runs || len(slotsUsed) != 9 || len(primaries) != 3 {
		t.Fatalf("%d keys: %d runs found in %d slots on %d primaries; want %d runs in 9 slots on 3", keys, len(slotOfRun), len(slotsUsed), len(primaries), runs)
	}
	// The gathered reads see every run, job and timer.
	page, err := s.ListRuns(ctx, "f", "", 0, runs)
	if err != nil || page.Total != runs || len(page.Runs) != runs {
		t.Fatalf("ListRuns = %d of %d, %v; want %d", len(page.Runs), page.Total, err, runs)
	}
	jobs, err := s.Claim(ctx, []string{"q"}, 2, 1<<50, "lease", 2*runs)
	if err != nil || len(jobs) != runs {
		t.Fatalf("Claim = %d jobs, %v; want %d", len(jobs), err, runs)
	}
	timers, err := s.DueTimers(ctx, 1<<51, 1<<52, 2*runs)
	if err != nil || len(timers) != runs {
		t.Fatalf("DueTimers = %d, %v; want %d", len(timers), err, runs)
	}
}

// TestCheckShards: the number of shards is recorded under the prefix, and a
// store opened with another one refuses to start, whichever way it
// changed, as it does on data written before the number was recorded.
func TestCheckShards(t *testing.T) {
	ctx := t.Context()
	client := redistest.Client(t)
	open := func(prefix string, shards int) *redisstore.Store {
		s, err := redisstore.New(client, redisstore.Options{Prefix: prefix, Shards: shards, Logger: testkit.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	prefix := redistest.Prefix(t)
	if err := open(prefix, 4).CheckShards(ctx); err != nil {
		t.Fatalf("first start with 4 shards: %v", err)
	}
	if err := open(prefix, 4).CheckShards(ctx); err != nil {
		t.Fatalf("second start with 4 shards: %v", err)
	}
	for _, n := range []int{1, 3} {
		if err := open(prefix, n).CheckShards(ctx); !errors.Is(err, redisstore.ErrShards) {
			t.Errorf("start with %d shards on data of 4: %v, want ErrShards", n, err)
		}
	}

	// Data of one shard written before the number was recorded.
	old := redistest.Prefix(t)
	if err := open(old, 1).PutDefinition(ctx, "f", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := open(old, 4).CheckShards(ctx); !errors.Is(err, redisstore.ErrShards) {
		t.Errorf("start with 4 shards on unrecorded data of one: %v, want ErrShards", err)
	}
	if err := open(old, 1).CheckShards(ctx); err != nil {
		t.Errorf("start with 1 shard on unrecorded data of one: %v", err)
	}
}
