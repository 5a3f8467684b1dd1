package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
)

// TestTwoInstancesOnRedis is two nqd instances (an engine each, on stores
// with clients of their own) sharing one Redis: diamond runs started on both
// at once, workers on both. Every run completes, every step runs once, every
// run has one terminal event, and every run's index status matches its
// stream.
func TestTwoInstancesOnRedis(t *testing.T) {
	runs := 1000
	if testing.Short() {
		runs = 100
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	prefix := redistest.Prefix(t)
	var engines []*engine.Engine
	var stores []engine.Store
	for range 2 {
		st := backendtest.OpenRedis(t, prefix)
		stores = append(stores, st)
		engines = append(engines, engine.New(st, engine.Options{PollInterval: 20 * time.Millisecond, Logger: testkit.Logger(t).Level(zerolog.WarnLevel)}))
	}
	mustDefine(t, engines[0], "diamond", "diamond")

	// Start every run at once, half through each instance.
	ids := make([]string, runs)
	var starters sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range runs {
		starters.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			s, err := engines[i%2].Start(ctx, "diamond", json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), "")
			if err != nil {
				t.Errorf("start %d: %v", i, err)
				return
			}
			ids[i] = s.FlowID
		})
	}

	var mu sync.Mutex
	ran := map[string]int{}
	var workers sync.WaitGroup
	wctx, stopWorkers := context.WithCancel(ctx)
	for w := range 8 {
		e := engines[w%2]
		workers.Go(func() {
			for wctx.Err() == nil {
				jobs, err := e.Claim(wctx, []string{"default"}, 8, 100*time.Millisecond)
				if err != nil {
					if wctx.Err() == nil {
						t.Errorf("claim: %v", err)
					}
					return
				}
				for _, j := range jobs {
					mu.Lock()
					ran[j.ID]++
					mu.Unlock()
					if j.Step == "final" {
						var in map[string]map[string]string
						if err := json.Unmarshal(j.Input, &in); err != nil || in["step.a.done"]["from"] != "parallelA" || in["step.b.done"]["from"] != "parallelB" {
							t.Errorf("final of %s got input %s, want both branches' emits", j.RunID, j.Input)
						}
					}
					ack := store.JobAck{Queue: j.Queue, ID: j.ID, Lease: j.Lease}
					var evs []event.Event
					for _, name := range defaultEmits[j.Step] {
						evs = append(evs, event.Event{Kind: "emit", Data: json.RawMessage(fmt.Sprintf(`{"event":%q,"payload":{"from":%q}}`, name, j.Step))})
					}
					if len(evs) > 0 {
						if _, err := e.Report(wctx, ack, evs, ""); err != nil {
							t.Errorf("report %s: %v", j.ID, err)
						}
					}
					if err := e.Complete(wctx, ack, nil); err != nil {
						t.Errorf("complete %s: %v", j.ID, err)
					}
				}
			}
		})
	}
	starters.Wait()

	// Wait until the completed index holds every run.
	for {
		page, err := stores[0].ListRuns(ctx, "diamond", store.RunCompleted, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if page.Total == int64(runs) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d runs completed before the deadline", page.Total, runs)
		case <-time.After(50 * time.Millisecond):
		}
	}
	stopWorkers()
	workers.Wait()

	if len(ran) != 4*runs {
		t.Errorf("%d jobs ran, want %d", len(ran), 4*runs)
	}
	for id, n := range ran {
		if n != 1 {
			t.Errorf("job %s ran %d times", id, n)
		}
	}
	for i, id := range ids {
		st := stores[i%2]
		got := kinds(t, st, id)
		terminal := count(got, "flow.completed") + count(got, "flow.failed") + count(got, "flow.cancelled")
		if terminal != 1 || count(got, "flow.completed") != 1 {
			t.Errorf("run %s has %d terminal events: %v", id, terminal, got)
		}
		for _, step := range []string{"start", "parallelA", "parallelB", "final"} {
			if n := count(got, "step.completed "+step); n != 1 {
				t.Errorf("run %s: step %s completed %d times", id, step, n)
			}
		}
		m, err := st.RunMeta(ctx, "diamond", id)
		if err != nil || m.Status != store.RunCompleted || m.CompletedSteps != 4 {
			t.Errorf("run %s record = %+v, %v; its stream ends in flow.completed", id, m, err)
		}
	}
	for _, status := range []string{store.RunRunning, store.RunFailed, store.RunCancelled} {
		if page, _ := stores[1].ListRuns(ctx, "diamond", status, 0, 0); page.Total != 0 {
			t.Errorf("%d runs indexed as %s", page.Total, status)
		}
	}
	done, err := stores[1].ListRuns(ctx, "diamond", store.RunCompleted, 0, runs)
	if err != nil {
		t.Fatal(err)
	}
	indexed := map[string]bool{}
	for _, r := range done.Runs {
		indexed[r.RunID] = r.Status == store.RunCompleted
	}
	for _, id := range ids {
		if !indexed[id] {
			t.Errorf("run %s missing from the completed index", id)
		}
	}
}
