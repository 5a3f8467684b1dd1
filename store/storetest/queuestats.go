package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// QueueStatsStore is a store with run and queue state that reports depths.
type QueueStatsStore interface {
	store.RunStore
	store.QueueStats
}

// runQueueStats checks QueueDepth against jobs enqueued through UpdateRun:
// ready, delayed and claimed jobs all count, only those whose time has come
// are due, and a claimed job is due again once its lease has run out.
func runQueueStats(t *testing.T, newStore func(t *testing.T) QueueStatsStore) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	mustDepth := func(now int64, want store.QueueDepth) {
		t.Helper()
		got, err := s.QueueDepth(ctx, "qs", now)
		if err != nil || got != want {
			t.Fatalf("QueueDepth(now=%d) = %+v, %v; want %+v", now, got, err, want)
		}
	}
	mustDepth(1000, store.QueueDepth{})

	m := store.RunMeta{FlowName: "fl", RunID: "r1", Status: store.RunRunning, StartedAt: 100, StepCount: 3}
	j := func(step string, readyAt int64) store.Job {
		return store.Job{ID: store.JobID("r1", step), Queue: "qs", FlowName: "fl", RunID: "r1", Step: step, Input: json.RawMessage(`{}`), ReadyAt: readyAt}
	}
	if _, err := s.UpdateRun(ctx, store.RunUpdate{Meta: m, Events: []event.Event{{Kind: "flow.started", FlowName: "fl", RunID: "r1", Subject: "r1"}},
		Enqueue: []store.Job{j("a", 100), j("b", 100), j("later", 5000)}}); err != nil {
		t.Fatal(err)
	}
	mustDepth(1000, store.QueueDepth{Jobs: 3, Due: 2})
	mustDepth(5000, store.QueueDepth{Jobs: 3, Due: 3})

	claimed, err := s.Claim(ctx, []string{"qs"}, 1000, 31000, "lease-1", 1)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("Claim = %v, %v", claimed, err)
	}
	mustDepth(1000, store.QueueDepth{Jobs: 3, Due: 1, Leased: 1})
	mustDepth(40000, store.QueueDepth{Jobs: 3, Due: 3})

	if _, err := s.QueueDepth(ctx, "a:b", 0); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("a bad queue name: got %v, want ErrInvalid", err)
	}
}
