package redisstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/redisstore"
)

// TestRunRecordIsContractHash checks the record's layout that other
// producers (the Node module, dashboards) read: the hash fields status,
// startedAt, completedAt, stepCount, completedSteps, emittedEvents and
// version under <p>:flows:<flow>:meta:<run>.
func TestRunRecordIsContractHash(t *testing.T) {
	ctx := t.Context()
	prefix := redistest.Prefix(t)
	s, client := newTestStore(t, redisstore.Options{Prefix: prefix})
	m := store.RunMeta{FlowName: "fl", RunID: "r1", Status: store.RunRunning, StartedAt: 1700000000123, StepCount: 3,
		EmittedEvents: map[string]int64{"a.done": 1700000000200}}
	if _, err := s.UpdateRun(ctx, store.RunUpdate{Meta: m}); err != nil {
		t.Fatal(err)
	}
	got, err := client.HGetAll(ctx, s.KeyPrefixOf("r1")+":flows:fl:meta:r1").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"status": "running", "startedAt": "1700000000123", "stepCount": "3",
		"completedSteps": "0", "emittedEvents": `{"a.done":1700000000200}`, "version": "1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("record hash (-want +got):\n%s", diff)
	}
	if n, _ := client.ZCard(ctx, s.KeyPrefixOf("r1")+":flows:fl:status:running").Result(); n != 1 {
		t.Errorf("running index holds %d runs, want 1", n)
	}
}

// TestRunUpdatePublishesLikeAppend checks that a run update's events reach
// live subscribers as the same records the stream holds.
func TestRunUpdatePublishesLikeAppend(t *testing.T) {
	ctx := t.Context()
	s, _ := newTestStore(t, redisstore.Options{})
	sub, err := s.Subscribe(ctx, store.Context{Type: "flow", ID: "r1"}, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ev := event.Event{Kind: "flow.started", Subject: "r1", RunID: "r1", FlowName: "fl", Data: json.RawMessage(`{"n":12345678901234567890}`)}
	res, err := s.UpdateRun(ctx, store.RunUpdate{Meta: store.RunMeta{FlowName: "fl", RunID: "r1", Status: store.RunRunning, StartedAt: 1}, Events: []event.Event{ev}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	switch got, err := store.Receive(rctx, sub); {
	case err == nil:
		stored, err := s.Range(ctx, store.Context{Type: "flow", ID: "r1"}, store.RangeQuery{})
		if err != nil || len(stored) != 1 {
			t.Fatalf("Range = %v, %v", stored, err)
		}
		gb, _ := json.Marshal(got)
		sb, _ := json.Marshal(stored[0])
		if string(gb) != string(sb) || got.ID != res.Events[0].ID {
			t.Errorf("published %s, stored %s", gb, sb)
		}
	default:
		t.Fatalf("no live record; subscription ended with %v", err)
	}
	page, err := s.IndexList(ctx, store.Index{Type: "flow", Name: "fl"}, 0, 10)
	if err != nil || page.Total != 1 {
		t.Errorf("flow index = %+v, %v", page, err)
	}
}

// TestJobInputKeepsLargeNumbers guards the job encoding: the scripts never
// re-encode a job's JSON, so numbers beyond a double's precision survive.
func TestJobInputKeepsLargeNumbers(t *testing.T) {
	ctx := t.Context()
	s, _ := newTestStore(t, redisstore.Options{})
	in := json.RawMessage(`{"id":12345678901234567890,"f":0.1}`)
	j := store.Job{ID: store.JobID("r1", "a"), Queue: "q", FlowName: "fl", RunID: "r1", Step: "a", Input: in}
	if _, err := s.UpdateRun(ctx, store.RunUpdate{Meta: store.RunMeta{FlowName: "fl", RunID: "r1", Status: store.RunRunning}, Enqueue: []store.Job{j}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(ctx, []string{"q"}, 10, 20, "L", 5)
	if err != nil || len(got) != 1 {
		t.Fatalf("Claim = %+v, %v", got, err)
	}
	if string(got[0].Input) != string(in) || got[0].Attempt != 1 || got[0].LeaseUntil != 20 {
		t.Errorf("claimed %+v", got[0])
	}
}

// TestRunUpdateChecksDefinition: an update naming a definition is refused,
// writing nothing, unless that is the flow's stored definition.
func TestRunUpdateChecksDefinition(t *testing.T) {
	ctx := t.Context()
	prefix := redistest.Prefix(t)
	// Several shards check no definition: they live on another shard
	// than most runs.
	s, client := newTestStore(t, redisstore.Options{Prefix: prefix, Shards: 1})
	if !s.Features().ChecksDefinitions {
		t.Fatal("Features().ChecksDefinitions = false")
	}
	update := func(run string, def []byte) error {
		_, err := s.UpdateRun(ctx, store.RunUpdate{Definition: def,
			Meta: store.RunMeta{FlowName: "fl", RunID: run, Status: store.RunRunning, StartedAt: 1}})
		return err
	}
	if err := update("r1", []byte(`{"v":1}`)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update naming a definition never stored = %v, want ErrConflict", err)
	}
	if err := s.PutDefinition(ctx, "fl", []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := update("r1", []byte(`{"v":1}`)); err != nil {
		t.Fatalf("update naming the stored definition = %v", err)
	}
	if err := s.PutDefinition(ctx, "fl", []byte(`{"v":2}`)); err != nil {
		t.Fatal(err)
	}
	if err := update("r2", []byte(`{"v":1}`)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update naming a replaced definition = %v, want ErrConflict", err)
	}
	if n, _ := client.Exists(ctx, s.KeyPrefixOf("r2")+":flows:fl:meta:r2", s.KeyPrefixOf("r2")+":flow:r2").Result(); n != 0 {
		t.Errorf("a refused update left %d keys", n)
	}
	if err := update("r2", nil); err != nil {
		t.Fatalf("update naming no definition = %v", err)
	}
}
