package redisstore

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
)

// A claim carries on past a shard that fails and hands out the others'
// jobs with the failure; the failing shard is then visited only by a claim
// that found nothing elsewhere, which makes it an ordinary shard again once
// it answers.
func TestClaimCarriesOnPastAFailingShard(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	t.Cleanup(func() { _ = client.Close() })
	s, err := New(client, Options{Prefix: redistest.Prefix(t), Shards: 3, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	// runs[i] and runs[3+i] are runs on shard i.
	var runs [6]string
	for n, found := 0, 0; found < 6; n++ {
		id := "r" + strconv.Itoa(n)
		if i := shardIndex(id, 3); runs[i] == "" {
			runs[i] = id
			found++
		} else if runs[3+i] == "" {
			runs[3+i] = id
			found++
		}
	}
	start := func(run string) {
		t.Helper()
		m := store.RunMeta{FlowName: "fl", RunID: run, Status: store.RunRunning, StartedAt: 100, StepCount: 1}
		j := store.Job{ID: store.JobID(run, "a"), Queue: "q", FlowName: "fl", RunID: run, Step: "a", Input: json.RawMessage(`{}`), ReadyAt: 100}
		if _, err := s.UpdateRun(t.Context(), store.RunUpdate{Meta: m, Events: []event.Event{{Kind: "flow.started", FlowName: "fl", RunID: run, Subject: run}}, Enqueue: []store.Job{j}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, run := range runs[:3] {
		start(run)
	}
	claim := func() ([]string, error) {
		jobs, err := s.Claim(t.Context(), []string{"q"}, 200, 10_000, "lease-"+strconv.Itoa(int(s.rotate.Load())), 3)
		var ids []string
		for _, j := range jobs {
			ids = append(ids, j.RunID)
		}
		return ids, err
	}

	// Shard 1 goes to a port nothing listens on.
	good := s.shards[1].pipe
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	s.shards[1].pipe = newPipeliner(down)
	got, err := claim()
	if len(got) != 2 || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("claim with shard 1 down = %v, %v; want the jobs of shards 0 and 2 and ErrUnavailable", got, err)
	}
	if !s.shards[1].failing.Load() {
		t.Fatal("shard 1 is not marked failing")
	}

	s.shards[1].pipe = good
	start(runs[3])
	if got, err := claim(); err != nil || len(got) != 1 || got[0] != runs[3] {
		t.Fatalf("claim = %v, %v; want the job of %s, without a look at the failing shard", got, err, runs[3])
	}
	if got, err := claim(); err != nil || len(got) != 1 || got[0] != runs[1] {
		t.Fatalf("claim that found nothing elsewhere = %v, %v; want the failing shard's job of %s", got, err, runs[1])
	}
	if s.shards[1].failing.Load() {
		t.Error("shard 1 is still marked failing after it answered")
	}
}
