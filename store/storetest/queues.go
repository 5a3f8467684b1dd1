package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// QueueStoreStore is a store with run state and the queue views.
type QueueStoreStore interface {
	store.RunStore
	store.QueueStore
}

// runQueueStore checks the pause switch and the queue listings: a paused
// queue hands out no job while the others still do, a resumed one hands its
// jobs out again, the pause is seen by a second handle on the same data, and
// QueueJobs pages by score. reopen returns another handle on s's data (a
// second instance).
func runQueueStore(t *testing.T, newStore func(t *testing.T) (s, reopen QueueStoreStore)) {
	t.Parallel()
	ctx := context.Background()
	s, other := newStore(t)

	if got, err := s.JobQueues(ctx); err != nil || len(got) != 0 {
		t.Fatalf("JobQueues of an empty store = %v, %v", got, err)
	}
	job := func(queue, step string, readyAt int64) store.Job {
		return store.Job{ID: store.JobID("r1", step), Queue: queue, FlowName: "fl", RunID: "r1", Step: step, Input: json.RawMessage(`{"n":1}`), ReadyAt: readyAt}
	}
	m := store.RunMeta{FlowName: "fl", RunID: "r1", Status: store.RunRunning, StartedAt: 100, StepCount: 4}
	if _, err := s.UpdateRun(ctx, store.RunUpdate{Meta: m, Events: []event.Event{{Kind: "flow.started", FlowName: "fl", RunID: "r1", Subject: "r1"}},
		Enqueue: []store.Job{job("qa", "a", 100), job("qa", "b", 200), job("qa", "c", 300), job("qb", "d", 100)}}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.JobQueues(ctx); err != nil || !slices.Equal(got, []string{"qa", "qb"}) {
		t.Fatalf("JobQueues = %v, %v; want [qa qb]", got, err)
	}

	ids := func(js []store.Job) []string {
		out := []string{}
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}
	page, err := s.QueueJobs(ctx, "qa", 0, 250, 0, 10)
	if err != nil || !slices.Equal(ids(page), []string{"r1:a", "r1:b"}) {
		t.Fatalf("QueueJobs(0..250) = %v, %v; want r1:a r1:b", ids(page), err)
	}
	if page[1].ReadyAt != 200 || string(page[1].Input) != `{"n":1}` || page[1].Step != "b" {
		t.Fatalf("QueueJobs job = %+v", page[1])
	}
	if page, err = s.QueueJobs(ctx, "qa", 0, 1000, 1, 1); err != nil || !slices.Equal(ids(page), []string{"r1:b"}) {
		t.Fatalf("QueueJobs offset 1 limit 1 = %v, %v; want r1:b", ids(page), err)
	}

	if err := s.SetQueuePaused(ctx, "qa", true); err != nil {
		t.Fatal(err)
	}
	if err := s.SetQueuePaused(ctx, "qa", true); err != nil {
		t.Fatalf("pausing twice: %v", err)
	}
	for _, h := range []QueueStoreStore{s, other} {
		if got, err := h.PausedQueues(ctx); err != nil || !slices.Equal(got, []string{"qa"}) {
			t.Fatalf("PausedQueues = %v, %v; want [qa]", got, err)
		}
	}
	got, err := other.Claim(ctx, []string{"qa", "qb"}, 1000, 31000, "lease-1", 10)
	if err != nil || !slices.Equal(ids(got), []string{"r1:d"}) {
		t.Fatalf("Claim with qa paused = %v, %v; want only r1:d of qb", ids(got), err)
	}
	if got, err = s.Claim(ctx, []string{"qa"}, 1000, 31000, "lease-2", 10); err != nil || len(got) != 0 {
		t.Fatalf("Claim of the paused qa = %v, %v; want nothing", ids(got), err)
	}

	if err := other.SetQueuePaused(ctx, "qa", false); err != nil {
		t.Fatal(err)
	}
	if got, err := s.PausedQueues(ctx); err != nil || len(got) != 0 {
		t.Fatalf("PausedQueues after resume = %v, %v", got, err)
	}
	if got, err = s.Claim(ctx, []string{"qa"}, 1000, 31000, "lease-3", 10); err != nil || len(got) != 3 {
		t.Fatalf("Claim of the resumed qa = %v, %v; want 3 jobs", ids(got), err)
	}
	// Claimed jobs are ordered by their lease end now.
	if page, err = s.QueueJobs(ctx, "qa", 1001, 1<<62, 0, 10); err != nil || len(page) != 3 || page[0].Lease != "lease-3" || page[0].ReadyAt != 31000 {
		t.Fatalf("QueueJobs of claimed jobs = %+v, %v", page, err)
	}

	if err := s.SetQueuePaused(ctx, "no:colons", true); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("SetQueuePaused of a bad name: %v, want ErrInvalid", err)
	}
	if _, err := s.QueueJobs(ctx, "a b", 0, 1, 0, 1); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("QueueJobs of a bad name: %v, want ErrInvalid", err)
	}
}
