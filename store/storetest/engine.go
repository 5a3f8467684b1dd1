package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// EngineStore is what the flow engine needs of a backend.
type EngineStore interface {
	store.Store
	store.DefinitionStore
	store.RunStore
	store.QueueStore
	Features() store.Features
}

var engineScenarios = []struct {
	name string
	run  func(t *testing.T, s EngineStore)
}{
	{"Definitions", testDefinitions},
	{"RunCreateAndVersion", testRunCreateAndVersion},
	{"RunUpdateRaceOneWins", testRunUpdateRace},
	{"RunStatusIndex", testRunStatusIndex},
	{"QueueClaimLeaseAndRedelivery", testQueueClaim},
	{"AckNeedsLease", testAckNeedsLease},
	{"HeldNeedsLeaseKeepsJob", testHeldNeedsLease},
	{"AppendHeldNeedsLease", testAppendHeld},
	{"UpdateRunRemembersKey", testUpdateRunKey},
	{"UpdateRunClaims", testUpdateRunClaims},
	{"Timers", testTimers},
	{"UpdateRunToAnotherStream", testUpdateRunStream},
	{"DeleteRuns", testDeleteRuns},
	{"FlowStats", testFlowStats},
}

// runEngine runs the flow engine's conformance scenarios (store.RunStore and
// store.DefinitionStore) against fresh stores from newStore.
func runEngine(t *testing.T, newStore func(t *testing.T) EngineStore) {
	for _, sc := range engineScenarios {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, newStore(t)) })
	}
}

func testDefinitions(t *testing.T, s EngineStore) {
	ctx := t.Context()
	if _, err := s.Definition(ctx, "f1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Definition of nothing: got %v, want ErrNotFound", err)
	}
	must(t, s.PutDefinition(ctx, "f1", []byte(`{"a":1}`)))
	must(t, s.PutDefinition(ctx, "f2", []byte(`{"b":2}`)))
	must(t, s.PutDefinition(ctx, "f1", []byte(`{"a":3}`)))
	got, err := s.Definition(ctx, "f1")
	must(t, err)
	if string(got) != `{"a":3}` {
		t.Errorf("Definition = %s, want the replacement", got)
	}
	all, err := s.Definitions(ctx)
	must(t, err)
	if len(all) != 2 || string(all["f2"]) != `{"b":2}` {
		t.Errorf("Definitions = %v", all)
	}
	must(t, s.DeleteDefinition(ctx, "f1"))
	if err := s.DeleteDefinition(ctx, "f1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second delete: got %v, want ErrNotFound", err)
	}
	if err := s.PutDefinition(ctx, "bad:name", []byte(`{}`)); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("bad name: got %v, want ErrInvalid", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func newRun(flow, run string, startedAt int64) store.RunMeta {
	return store.RunMeta{FlowName: flow, RunID: run, Status: store.RunRunning, StartedAt: startedAt, StepCount: 2}
}

func testRunCreateAndVersion(t *testing.T, s EngineStore) {
	ctx := t.Context()
	m := newRun("fl", "r1", 1000)
	start := event.Event{Kind: "flow.started", Subject: "r1", RunID: "r1", FlowName: "fl", Data: json.RawMessage(`{"input":{}}`)}
	res, err := s.UpdateRun(ctx, store.RunUpdate{Meta: m, Events: []event.Event{start}})
	must(t, err)
	if len(res.Events) != 1 || res.Events[0].ID.IsZero() {
		t.Fatalf("UpdateRun events = %+v", res.Events)
	}
	if _, err := s.UpdateRun(ctx, store.RunUpdate{Meta: m, Events: []event.Event{start}}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second create: got %v, want ErrConflict", err)
	}
	evs, err := s.Range(ctx, store.Context{Type: "flow", ID: "r1"}, store.RangeQuery{})
	must(t, err)
	if len(evs) != 1 {
		t.Fatalf("stream has %d events after a conflicting create, want 1", len(evs))
	}
	page, err := s.IndexList(ctx, store.Index{Type: "flow", Name: "fl"}, 0, 10)
	must(t, err)
	if page.Total != 1 || page.Entries[0].ID != "r1" {
		t.Errorf("flow index = %+v", page)
	}

	got, err := s.RunMeta(ctx, "fl", "r1")
	must(t, err)
	if got.Version != 1 || got.Status != store.RunRunning || got.StartedAt != 1000 {
		t.Errorf("RunMeta = %+v", got)
	}
	next := got
	next.CompletedSteps = 1
	next.EmittedEvents = map[string]int64{"a.done": 1500}
	next.State = json.RawMessage(`{"x":1}`)
	_, err = s.UpdateRun(ctx, store.RunUpdate{Meta: next, PrevStatus: got.Status})
	must(t, err)
	got2, err := s.RunMeta(ctx, "fl", "r1")
	must(t, err)
	want := next
	want.Version = 2
	if diff := cmp.Diff(want, got2); diff != "" {
		t.Errorf("RunMeta after update (-want +got):\n%s", diff)
	}
	if _, err := s.UpdateRun(ctx, store.RunUpdate{Meta: next, PrevStatus: got.Status}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("stale update: got %v, want ErrConflict", err)
	}
	if _, err := s.RunMeta(ctx, "fl", "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RunMeta of nothing: got %v, want ErrNotFound", err)
	}
}

// An update naming another stream appends its events there, indexed by
// that stream's type, and still checks and writes the record.
func testUpdateRunStream(t *testing.T, s EngineStore) {
	ctx := t.Context()
	c := store.Context{Type: "trigger", ID: "nightly"}
	fired := event.Event{Kind: "trigger.fired", Subject: "nightly", Trigger: "nightly", Data: json.RawMessage(`{"dueAt":1000}`)}
	m := newRun("sched", "nightly", 1000)
	tm := store.Timer{Kind: "schedule", FlowName: "sched", RunID: "nightly", Step: "due", Due: 2000}
	res, err := s.UpdateRun(ctx, store.RunUpdate{Meta: m, Events: []event.Event{fired}, Stream: c, SetTimers: []store.Timer{tm}})
	must(t, err)
	if len(res.Events) != 1 || res.Events[0].ID.IsZero() {
		t.Fatalf("UpdateRun events = %+v", res.Events)
	}
	if _, err := s.UpdateRun(ctx, store.RunUpdate{Meta: m, Events: []event.Event{fired}, Stream: c}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale update: got %v, want ErrConflict", err)
	}
	evs, err := s.Range(ctx, c, store.RangeQuery{})
	must(t, err)
	if len(evs) != 1 || evs[0].Kind != "trigger.fired" || evs[0].ID != res.Events[0].ID {
		t.Fatalf("trigger stream = %+v", evs)
	}
	if evs, err := s.Range(ctx, store.Context{Type: "flow", ID: "nightly"}, store.RangeQuery{}); err != nil || len(evs) != 0 {
		t.Fatalf("run stream = %+v, %v; want it empty", evs, err)
	}
	page, err := s.IndexList(ctx, store.Index{Type: "trigger"}, 0, 10)
	must(t, err)
	if page.Total != 1 || page.Entries[0].ID != "nightly" {
		t.Errorf("trigger index = %+v", page)
	}
	got, err := s.RunMeta(ctx, "sched", "nightly")
	must(t, err)
	if got.Version != 1 {
		t.Errorf("RunMeta = %+v", got)
	}
	timers, err := s.DueTimers(ctx, 2000, 3000, 10)
	must(t, err)
	if len(timers) != 1 || timers[0].Name() != tm.Name() {
		t.Errorf("due timers = %+v", timers)
	}
	bad := store.RunUpdate{Meta: got, Events: []event.Event{fired}, Stream: store.Context{Type: "trigger", ID: "a:b"}}
	if _, err := s.UpdateRun(ctx, bad); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("update to a bad stream: got %v, want ErrInvalid", err)
	}
}

func testRunUpdateRace(t *testing.T, s EngineStore) {
	ctx := t.Context()
	m := newRun("fl", "race", 1)
	_, err := s.UpdateRun(ctx, store.RunUpdate{Meta: m})
	must(t, err)
	m.Version = 1
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			u := m
			u.Status = store.RunCompleted
			_, errs[i] = s.UpdateRun(ctx, store.RunUpdate{Meta: u, PrevStatus: store.RunRunning, Events: []event.Event{
				{Kind: "flow.completed", Subject: "race", RunID: "race", Data: json.RawMessage(fmt.Sprintf(`{"by":%d}`, i))},
			}})
		})
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("racing update: %v", err)
		}
	}
	evs, err := s.Range(ctx, store.Context{Type: "flow", ID: "race"}, store.RangeQuery{})
	must(t, err)
	if wins != 1 || len(evs) != 1 {
		t.Errorf("%d updates won and %d terminal events stored, want 1 and 1", wins, len(evs))
	}
}

func testRunStatusIndex(t *testing.T, s EngineStore) {
	ctx := t.Context()
	for i := range 5 {
		_, err := s.UpdateRun(ctx, store.RunUpdate{Meta: newRun("fl", fmt.Sprintf("r%d", i), int64(100+i)), Events: []event.Event{
			{Kind: "flow.started", FlowName: "fl", RunID: fmt.Sprintf("r%d", i), Subject: fmt.Sprintf("r%d", i)},
		}})
		must(t, err)
	}
	// Complete r1 and r3.
	for _, id := range []string{"r1", "r3"} {
		m, err := s.RunMeta(ctx, "fl", id)
		must(t, err)
		m.Status, m.CompletedAt = store.RunCompleted, 999
		_, err = s.UpdateRun(ctx, store.RunUpdate{Meta: m, PrevStatus: store.RunRunning})
		must(t, err)
	}
	ids := func(p store.RunPage) []string {
		var out []string
		for _, r := range p.Runs {
			out = append(out, r.RunID)
		}
		return out
	}
	running, err := s.ListRuns(ctx, "fl", store.RunRunning, 1, 2)
	must(t, err)
	if diff := cmp.Diff([]string{"r2", "r0"}, ids(running)); diff != "" || running.Total != 3 {
		t.Errorf("running page 2 (total %d) (-want +got):\n%s", running.Total, diff)
	}
	done, err := s.ListRuns(ctx, "fl", store.RunCompleted, 0, 10)
	must(t, err)
	if diff := cmp.Diff([]string{"r3", "r1"}, ids(done)); diff != "" || done.Total != 2 || done.Runs[0].CompletedAt != 999 {
		t.Errorf("completed (total %d) (-want +got):\n%s", done.Total, diff)
	}
	all, err := s.ListRuns(ctx, "fl", "", 0, 10)
	must(t, err)
	// The unfiltered list is the flow's run index, ordered by the time of
	// each run's first event (the store's clock, not StartedAt), so only
	// its members and their statuses are fixed here.
	status := map[string]string{}
	for _, r := range all.Runs {
		status[r.RunID] = r.Status
	}
	want := map[string]string{"r0": store.RunRunning, "r1": store.RunCompleted, "r2": store.RunRunning, "r3": store.RunCompleted, "r4": store.RunRunning}
	if diff := cmp.Diff(want, status); diff != "" || all.Total != 5 {
		t.Errorf("all runs (total %d) (-want +got):\n%s", all.Total, diff)
	}
}

func job(run, step, queue string, readyAt int64) store.Job {
	return store.Job{ID: store.JobID(run, step), Queue: queue, FlowName: "fl", RunID: run, Step: step, Input: json.RawMessage(`{"k":[1]}`), ReadyAt: readyAt}
}

func enqueue(t *testing.T, s EngineStore, run string, jobs ...store.Job) {
	t.Helper()
	m, err := s.RunMeta(t.Context(), "fl", run)
	if errors.Is(err, store.ErrNotFound) {
		m, err = newRun("fl", run, 1), nil
	}
	must(t, err)
	_, err = s.UpdateRun(t.Context(), store.RunUpdate{Meta: m, PrevStatus: m.Status, Enqueue: jobs})
	must(t, err)
}

func testQueueClaim(t *testing.T, s EngineStore) {
	ctx := t.Context()
	enqueue(t, s, "q1", job("q1", "a", "qa", 100), job("q1", "b", "qa", 300), job("q1", "c", "qb", 100))
	got, err := s.Claim(ctx, []string{"qa", "qb"}, 200, 1200, "L1", 10)
	must(t, err)
	if len(got) != 2 || got[0].ID != "q1:a" || got[1].ID != "q1:c" || got[0].Attempt != 1 || got[0].Lease != "L1" || got[0].Expired {
		t.Fatalf("Claim = %+v, want q1:a and q1:c at attempt 1", got)
	}
	if string(got[0].Input) != `{"k":[1]}` {
		t.Errorf("input = %s", got[0].Input)
	}
	if again, err := s.Claim(ctx, []string{"qa", "qb"}, 250, 1250, "L2", 10); err != nil || len(again) != 0 {
		t.Fatalf("Claim while leased: %+v, %v; want nothing", again, err)
	}
	if _, err := s.Heartbeat(ctx, store.JobAck{Queue: "qa", ID: "q1:a", Lease: "L1"}, 2000); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Heartbeat(ctx, store.JobAck{Queue: "qa", ID: "q1:a", Lease: "other"}, 2000); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Heartbeat with another lease: got %v, want ErrConflict", err)
	}
	if _, err := s.Heartbeat(ctx, store.JobAck{Queue: "qa", ID: "q1:zz", Lease: "L1"}, 2000); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Heartbeat of no job: got %v, want ErrNotFound", err)
	}
	// At 1500 c's lease (1200) has expired, a's was extended to 2000, b is ready.
	got, err = s.Claim(ctx, []string{"qa", "qb"}, 1500, 2500, "L3", 10)
	must(t, err)
	byID := map[string]store.Job{}
	for _, j := range got {
		byID[j.ID] = j
	}
	if len(got) != 2 || byID["q1:b"].Attempt != 1 || byID["q1:c"].Attempt != 2 || byID["q1:c"].Lease != "L3" ||
		byID["q1:b"].Expired || !byID["q1:c"].Expired {
		t.Errorf("Claim after expiry = %+v, want b at attempt 1 and c redelivered at attempt 2, expired", got)
	}
	if _, err := s.Heartbeat(ctx, store.JobAck{Queue: "qb", ID: "q1:c", Lease: "L1"}, 3000); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Heartbeat of a lost lease: got %v, want ErrConflict", err)
	}
	j, err := s.Job(ctx, store.JobRef{Queue: "qb", ID: "q1:c"})
	must(t, err)
	if j.Lease != "L3" || j.LeaseUntil != 2500 {
		t.Errorf("Job = %+v", j)
	}
	if got, err := s.Claim(ctx, []string{"qa"}, 100000, 100001, "L4", 1); err != nil || len(got) != 1 {
		t.Errorf("Claim with max 1 = %+v, %v", got, err)
	}
}

func testAckNeedsLease(t *testing.T, s EngineStore) {
	ctx := t.Context()
	enqueue(t, s, "k1", job("k1", "a", "qa", 0))
	got, err := s.Claim(ctx, []string{"qa"}, 10, 1000, "L1", 1)
	must(t, err)
	if len(got) != 1 {
		t.Fatalf("Claim = %+v", got)
	}
	m, err := s.RunMeta(ctx, "fl", "k1")
	must(t, err)
	_, err = s.UpdateRun(ctx, store.RunUpdate{Meta: m, PrevStatus: m.Status, Ack: &store.JobAck{Queue: "qa", ID: "k1:a", Lease: "wrong"}})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("ack with a wrong lease: got %v, want ErrConflict", err)
	}
	m2, err := s.RunMeta(ctx, "fl", "k1")
	must(t, err)
	if m2.Version != m.Version {
		t.Errorf("a refused ack moved the version from %d to %d", m.Version, m2.Version)
	}
	_, err = s.UpdateRun(ctx, store.RunUpdate{Meta: m, PrevStatus: m.Status, Ack: &store.JobAck{Queue: "qa", ID: "k1:a", Lease: "L1"}})
	must(t, err)
	if _, err := s.Job(ctx, store.JobRef{Queue: "qa", ID: "k1:a"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("acked job still there: %v", err)
	}
	if got, _ := s.Claim(ctx, []string{"qa"}, 1e12, 1e12+1, "L2", 1); len(got) != 0 {
		t.Errorf("acked job claimed again: %+v", got)
	}
}

// An update naming a held job is written only while the job is held by
// that lease, and leaves the job claimed as it was.
func testHeldNeedsLease(t *testing.T, s EngineStore) {
	ctx := t.Context()
	enqueue(t, s, "h1", job("h1", "a", "qa", 0))
	got, err := s.Claim(ctx, []string{"qa"}, 10, 1000, "L1", 1)
	must(t, err)
	if len(got) != 1 {
		t.Fatalf("Claim = %+v", got)
	}
	m, err := s.RunMeta(ctx, "fl", "h1")
	must(t, err)
	ref := store.JobRef{Queue: "qa", ID: "h1:a"}
	for _, lease := range []string{"wrong", ""} {
		_, err = s.UpdateRun(ctx, store.RunUpdate{Meta: m, PrevStatus: m.Status, Held: &store.JobAck{Queue: "qa", ID: "h1:a", Lease: lease}})
		if !errors.Is(err, store.ErrConflict) {
			t.Fatalf("update naming the job held by lease %q: got %v, want ErrConflict", lease, err)
		}
	}
	_, err = s.UpdateRun(ctx, store.RunUpdate{Meta: m, PrevStatus: m.Status, Held: &store.JobAck{Queue: "qa", ID: "h1:zz", Lease: "L1"}})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update naming a job that is not there: got %v, want ErrConflict", err)
	}
	if m2, err := s.RunMeta(ctx, "fl", "h1"); err != nil || m2.Version != m.Version {
		t.Fatalf("refused updates moved the run to %+v, %v; want version %d", m2, err, m.Version)
	}
	_, err = s.UpdateRun(ctx, store.RunUpdate{Meta: m, PrevStatus: m.Status, Held: &store.JobAck{Queue: "qa", ID: "h1:a", Lease: "L1"}})
	must(t, err)
	if m2, err := s.RunMeta(ctx, "fl", "h1"); err != nil || m2.Version != m.Version+1 {
		t.Errorf("after the update the run is %+v, %v; want version %d", m2, err, m.Version+1)
	}
	j, err := s.Job(ctx, ref)
	if err != nil || j.Lease != "L1" || j.LeaseUntil != 1000 {
		t.Errorf("held job after the update = %+v, %v; want it still held by L1 until 1000", j, err)
	}
	_, err = s.UpdateRun(ctx, store.RunUpdate{
		Meta: m, PrevStatus: m.Status,
		Ack: &store.JobAck{Queue: "qa", ID: "h1:a", Lease: "L1"}, Held: &store.JobAck{Queue: "qa", ID: "h1:a", Lease: "L1"},
	})
	if !errors.Is(err, store.ErrInvalid) {
		t.Errorf("update with both an ack and a held job: got %v, want ErrInvalid", err)
	}
}

// An append that names a held job stores its events only while the job is
// held by that lease; otherwise it stores and replays nothing.
func testAppendHeld(t *testing.T, s EngineStore) {
	ctx := t.Context()
	enqueue(t, s, "p1", job("p1", "a", "qa", 0))
	got, err := s.Claim(ctx, []string{"qa"}, 10, 1000, "L1", 1)
	must(t, err)
	if len(got) != 1 {
		t.Fatalf("Claim = %+v", got)
	}
	c := store.Context{Type: "flow", ID: "p1"}
	before, err := s.Range(ctx, c, store.RangeQuery{})
	must(t, err)
	log := []event.Event{{Kind: "log", Subject: "p1", Data: json.RawMessage(`{"msg":"x"}`)}}
	held := func(lease string) store.AppendOptions {
		return store.AppendOptions{IdempotencyKey: "k1", Held: &store.JobAck{Queue: "qa", ID: "p1:a", Lease: lease}}
	}
	if _, err := s.Append(ctx, c, log, held("wrong")); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("append naming a job held by another lease: got %v, want ErrConflict", err)
	}
	res, err := s.Append(ctx, c, log, held("L1"))
	must(t, err)
	if len(res.Events) != 1 || res.Replayed {
		t.Fatalf("append by the holder = %+v", res)
	}
	again, err := s.Append(ctx, c, log, held("L1"))
	must(t, err)
	if !again.Replayed || len(again.Events) != 1 || again.Events[0].ID != res.Events[0].ID {
		t.Errorf("repeat by the holder = %+v; want the first append replayed", again)
	}
	// The job is taken over: the old holder's repeat is refused, not replayed.
	if got, err := s.Claim(ctx, []string{"qa"}, 2000, 3000, "L2", 1); err != nil || len(got) != 1 {
		t.Fatalf("Claim after the lease ran out = %+v, %v", got, err)
	}
	if _, err := s.Append(ctx, c, log, held("L1")); !errors.Is(err, store.ErrConflict) {
		t.Errorf("repeat under a lost lease: got %v, want ErrConflict", err)
	}
	after, err := s.Range(ctx, c, store.RangeQuery{})
	must(t, err)
	if len(after) != len(before)+1 {
		t.Errorf("stream grew from %d to %d events; want the holder's one", len(before), len(after))
	}
	if j, err := s.Job(ctx, store.JobRef{Queue: "qa", ID: "p1:a"}); err != nil || j.Lease != "L2" {
		t.Errorf("job after the appends = %+v, %v; want it held by L2", j, err)
	}
}

// A run update's idempotency key makes a later append with that key replay
// the update's events, whatever the append carries; a refused update
// remembers nothing, and the update itself never replays.
func testUpdateRunKey(t *testing.T, s EngineStore) {
	ctx := t.Context()
	c := store.Context{Type: "flow", ID: "k1"}
	m := newRun("fl", "k1", 1000)
	start := event.Event{Kind: "flow.started", Subject: "k1", RunID: "k1", FlowName: "fl"}
	_, err := s.UpdateRun(ctx, store.RunUpdate{Meta: m, Events: []event.Event{start}})
	must(t, err)
	m.Version = 1
	report := []event.Event{
		{Kind: "step.started", Subject: "k1", RunID: "k1", FlowName: "fl", Step: "a"},
		{Kind: "emit", Subject: "k1", RunID: "k1", FlowName: "fl", Step: "a", Data: json.RawMessage(`{"event":"a.done"}`)},
	}
	if _, err := s.UpdateRun(ctx, store.RunUpdate{Meta: newRun("fl", "k1", 1000), Events: report, IdempotencyKey: "refused"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update at a stale version: got %v, want ErrConflict", err)
	}
	res, err := s.UpdateRun(ctx, store.RunUpdate{Meta: m, Events: report, IdempotencyKey: "r1"})
	must(t, err)
	if len(res.Events) != 2 || res.Replayed {
		t.Fatalf("keyed update = %+v", res)
	}
	again, err := s.Append(ctx, c, report[:1], store.AppendOptions{IdempotencyKey: "r1"})
	must(t, err)
	if !again.Replayed || len(again.Events) != 2 || again.Events[0].ID != res.Events[0].ID ||
		again.Events[1].ID != res.Events[1].ID || again.Events[1].Kind != "emit" {
		t.Errorf("append with the update's key = %+v; want the update's two events replayed", again)
	}
	fresh, err := s.Append(ctx, c, report[:1], store.AppendOptions{IdempotencyKey: "refused"})
	must(t, err)
	if fresh.Replayed {
		t.Errorf("append with the refused update's key replayed %+v; want it appended", fresh.Events)
	}
	// Keys name no run version: a later update may carry one again.
	m.Version = 2
	if _, err := s.UpdateRun(ctx, store.RunUpdate{Meta: m, Events: report[:1], IdempotencyKey: "r1"}); err != nil {
		t.Errorf("second update with the key: %v", err)
	}
	evs, err := s.Range(ctx, c, store.RangeQuery{})
	must(t, err)
	if len(evs) != 5 {
		t.Errorf("stream has %d events, want 5: the start, the keyed update's two, the append's one and the last update's one", len(evs))
	}
	if _, err := s.UpdateRun(ctx, store.RunUpdate{Meta: m, IdempotencyKey: "r2"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("key without events: got %v, want ErrInvalid", err)
	}
}

// A store that claims in its run updates takes ready jobs in the update's
// own write, after the rest of it: not the job the update acks, nor one of
// a paused queue, and nothing when the update is refused. Other stores say
// they do not.
func testUpdateRunClaims(t *testing.T, s EngineStore) {
	if !s.Features().ClaimsInUpdate {
		t.Skip("the store does not claim in its run updates")
	}
	ctx := t.Context()
	enqueue(t, s, "c1", job("c1", "a", "qa", 0))
	enqueue(t, s, "c2", job("c2", "a", "qa", 5), job("c2", "b", "qb", 5))
	held, err := s.Claim(ctx, []string{"qa"}, 1, 1000, "L1", 1)
	must(t, err)
	if len(held) != 1 || held[0].ID != "c1:a" {
		t.Fatalf("Claim = %+v", held)
	}
	must(t, s.SetQueuePaused(ctx, "qb", true))
	m, err := s.RunMeta(ctx, "fl", "c1")
	must(t, err)
	claim := &store.ClaimRequest{Queues: []string{"qa", "qb"}, Now: 10, LeaseUntil: 2000, Lease: "L2", Max: 5}
	stale := m
	stale.Version++
	if res, err := s.UpdateRun(ctx, store.RunUpdate{Meta: stale, PrevStatus: m.Status, Claim: claim}); !errors.Is(err, store.ErrConflict) || len(res.Claimed) != 0 {
		t.Fatalf("refused update = %+v, %v; want ErrConflict and no jobs", res, err)
	}
	res, err := s.UpdateRun(ctx, store.RunUpdate{Meta: m, PrevStatus: m.Status, Ack: &store.JobAck{Queue: "qa", ID: "c1:a", Lease: "L1"}, Claim: claim})
	must(t, err)
	if len(res.Claimed) != 1 || res.Claimed[0].ID != "c2:a" || res.Claimed[0].Lease != "L2" || res.Claimed[0].LeaseUntil != 2000 {
		t.Fatalf("claimed %+v; want c2:a under L2 until 2000", res.Claimed)
	}
	if j, err := s.Job(ctx, store.JobRef{Queue: "qa", ID: "c2:a"}); err != nil || j.Lease != "L2" {
		t.Errorf("stored job = %+v, %v; want it held by L2", j, err)
	}
	if _, err := s.Job(ctx, store.JobRef{Queue: "qa", ID: "c1:a"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("acked job: %v; want it gone", err)
	}
	if j, err := s.Job(ctx, store.JobRef{Queue: "qb", ID: "c2:b"}); err != nil || j.Lease != "" {
		t.Errorf("job of the paused queue = %+v, %v; want it unclaimed", j, err)
	}
}

func testTimers(t *testing.T, s EngineStore) {
	ctx := t.Context()
	m := newRun("fl", "t1", 1)
	t1 := store.Timer{Kind: "retry", FlowName: "fl", RunID: "t1", Step: "a", Due: 500}
	t2 := store.Timer{Kind: "retry", FlowName: "fl", RunID: "t1", Step: "b", Due: 900}
	_, err := s.UpdateRun(ctx, store.RunUpdate{Meta: m, SetTimers: []store.Timer{t1, t2}})
	must(t, err)
	if got, err := s.DueTimers(ctx, 400, 10000, 10); err != nil || len(got) != 0 {
		t.Fatalf("DueTimers early = %+v, %v", got, err)
	}
	got, err := s.DueTimers(ctx, 600, 5000, 10)
	must(t, err)
	if diff := cmp.Diff([]store.Timer{t1}, got); diff != "" {
		t.Fatalf("DueTimers (-want +got):\n%s", diff)
	}
	// Held: another caller does not get it until the hold ends.
	if got, _ := s.DueTimers(ctx, 1000, 6000, 10); len(got) != 1 || got[0].Step != "b" {
		t.Errorf("DueTimers while a is held = %+v, want only b", got)
	}
	m.Version = 1
	_, err = s.UpdateRun(ctx, store.RunUpdate{Meta: m, PrevStatus: m.Status, ClearTimers: []store.Timer{t1}})
	must(t, err)
	if got, _ := s.DueTimers(ctx, 5500, 9000, 10); len(got) != 0 {
		t.Errorf("cleared timer came back: %+v", got)
	}
}

func testDeleteRuns(t *testing.T, s EngineStore) {
	ctx := t.Context()
	for i := range 3 {
		id := fmt.Sprintf("d%d", i)
		_, err := s.UpdateRun(ctx, store.RunUpdate{Meta: newRun("gone", id, int64(i+1)), Events: []event.Event{{Kind: "flow.started", FlowName: "gone", RunID: id, Subject: id}}})
		must(t, err)
	}
	n, err := s.DeleteRuns(ctx, "gone")
	must(t, err)
	if n != 3 {
		t.Errorf("DeleteRuns = %d, want 3", n)
	}
	if p, _ := s.ListRuns(ctx, "gone", "", 0, 10); p.Total != 0 || len(p.Runs) != 0 {
		t.Errorf("runs left: %+v", p)
	}
	if p, _ := s.ListRuns(ctx, "gone", store.RunRunning, 0, 10); p.Total != 0 {
		t.Errorf("running index left: %+v", p)
	}
	if info, _ := s.Info(ctx, store.Context{Type: "flow", ID: "d1"}); info.Length != 0 {
		t.Errorf("stream left with %d events", info.Length)
	}
	if _, err := s.RunMeta(ctx, "gone", "d1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("meta left: %v", err)
	}
}

// testFlowStats: a flow's stats follow its runs through every status move,
// equal to the runs list's totals at each step.
func testFlowStats(t *testing.T, s EngineStore) {
	ctx := t.Context()
	check := func(when string, want store.FlowStats) {
		t.Helper()
		got, err := store.ReadFlowStats(ctx, s, "st")
		must(t, err)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: stats (-want +got):\n%s", when, diff)
		}
		all, err := s.ListRuns(ctx, "st", "", 0, 0)
		must(t, err)
		if all.Total != got.Total {
			t.Errorf("%s: stats total %d, runs list total %d", when, got.Total, all.Total)
		}
	}
	check("no runs", store.FlowStats{})
	for i := range 4 {
		id := fmt.Sprintf("s%d", i)
		_, err := s.UpdateRun(ctx, store.RunUpdate{Meta: newRun("st", id, int64(100+i)), Events: []event.Event{{Kind: "flow.started", FlowName: "st", RunID: id, Subject: id}}})
		must(t, err)
	}
	started, err := s.ListRuns(ctx, "st", "", 0, 1)
	must(t, err)
	lastRun := started.Runs[0].StartedAt
	check("four running", store.FlowStats{Total: 4, Running: 4, LastRunAt: lastRun})
	move := func(id, status string, end int64) {
		t.Helper()
		m, err := s.RunMeta(ctx, "st", id)
		must(t, err)
		prev := m.Status
		m.Status, m.CompletedAt = status, end
		_, err = s.UpdateRun(ctx, store.RunUpdate{Meta: m, PrevStatus: prev})
		must(t, err)
	}
	move("s0", store.RunAwaiting, 0)
	move("s1", store.RunCompleted, 500)
	move("s2", store.RunFailed, 700)
	move("s3", store.RunCancelled, 600)
	check("one of each", store.FlowStats{Total: 4, Awaiting: 1, Success: 1, Failure: 1, Cancel: 1, LastRunAt: lastRun, LastCompletedAt: 700})
	move("s0", store.RunRunning, 0)
	check("resumed", store.FlowStats{Total: 4, Running: 1, Success: 1, Failure: 1, Cancel: 1, LastRunAt: lastRun, LastCompletedAt: 700})
	_, err = s.DeleteRuns(ctx, "st")
	must(t, err)
	check("cleared", store.FlowStats{})
}
