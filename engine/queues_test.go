package engine_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
)

// TestQueueViews follows one diamond run through the queue views: its entry
// job waits, a paused queue hands it to no worker and counts it as paused,
// the resumed queue hands it out, the job's log lines are its logs, and once
// the run completed every step is a completed job of the queue, counted by
// the run index.
func TestQueueViews(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		ctx := t.Context()
		c := testkit.NewClock(time.UnixMilli(1_800_000_000_000))
		e := newEngine(t, st, c)
		mustDefine(t, e, "dia", "diamond")
		started, err := e.Start(ctx, "dia", json.RawMessage(`{"n":1}`), "")
		if err != nil {
			t.Fatal(err)
		}
		run := started.FlowID

		names, err := e.QueueNames(ctx)
		if err != nil || len(names) != 1 || names[0] != "default" {
			t.Fatalf("QueueNames = %v, %v; want [default]", names, err)
		}
		page, err := e.QueueJobs(ctx, "default", []string{engine.JobWaiting}, 0, 10)
		if err != nil || page.Total != 1 || len(page.Jobs) != 1 || page.Jobs[0].ID != run+":start" || page.Jobs[0].State != engine.JobWaiting {
			t.Fatalf("waiting jobs = %+v, %v", page, err)
		}
		if string(page.Jobs[0].Input) != `{"n":1}` || page.Jobs[0].CreatedAt != c.Now().UnixMilli() {
			t.Fatalf("waiting job = %+v", page.Jobs[0])
		}

		if err := e.SetQueuePaused(ctx, "default", true); err != nil {
			t.Fatal(err)
		}
		if jobs, err := e.Claim(ctx, []string{"default"}, 10, 0); err != nil || len(jobs) != 0 {
			t.Fatalf("claim of a paused queue = %v, %v; want nothing", jobs, err)
		}
		q, err := e.Queue(ctx, "default")
		if err != nil || !q.Paused || q.Counts != (engine.QueueCounts{Paused: 1}) {
			t.Fatalf("paused queue = %+v, %v", q, err)
		}
		if j, err := e.QueueJob(ctx, "default", run+":start"); err != nil || j.State != engine.JobPaused {
			t.Fatalf("job of a paused queue = %+v, %v", j, err)
		}

		if err := e.SetQueuePaused(ctx, "default", false); err != nil {
			t.Fatal(err)
		}
		jobs, err := e.Claim(ctx, []string{"default"}, 10, 0)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim of the resumed queue = %v, %v", jobs, err)
		}
		if q, err = e.Queue(ctx, "default"); err != nil || q.Paused || q.Counts != (engine.QueueCounts{Active: 1}) {
			t.Fatalf("queue with a job held = %+v, %v", q, err)
		}
		ack := store.JobAck{Queue: "default", ID: jobs[0].ID, Lease: jobs[0].Lease}
		if _, err := e.Report(ctx, ack, []event.Event{
			{Kind: "step.started"},
			{Kind: "log", Data: json.RawMessage(`{"level":"info","message":"one"}`)},
			{Kind: "log.warn", Data: json.RawMessage(`{"message":"two"}`)},
		}, ""); err != nil {
			t.Fatal(err)
		}
		logs, next, err := e.JobLogs(ctx, "default", run+":start", event.ID{}, 1)
		if err != nil || len(logs) != 1 || logs[0].Kind != "log" || next.IsZero() {
			t.Fatalf("first page of logs = %v, next %v, %v", logs, next, err)
		}
		if logs, next, err = e.JobLogs(ctx, "default", run+":start", next, 10); err != nil || len(logs) != 1 || logs[0].Kind != "log.warn" || !next.IsZero() {
			t.Fatalf("second page of logs = %v, next %v, %v", logs, next, err)
		}
		if _, err := e.Report(ctx, ack, []event.Event{
			{Kind: "emit", Data: json.RawMessage(`{"event":"step.a.trigger"}`)},
			{Kind: "emit", Data: json.RawMessage(`{"event":"step.b.trigger"}`)},
		}, ""); err != nil {
			t.Fatal(err)
		}
		if err := e.Complete(ctx, ack, nil); err != nil {
			t.Fatal(err)
		}
		work(t, e, c, nil)

		if q, err = e.Queue(ctx, "default"); err != nil || q.Counts != (engine.QueueCounts{Completed: 1}) {
			t.Fatalf("queue after the run = %+v, %v", q, err)
		}
		page, err = e.QueueJobs(ctx, "default", engine.JobStates, 0, 10)
		if err != nil || page.Total != 1 || len(page.Jobs) != 4 {
			t.Fatalf("all jobs after the run = %+v, %v; want the run's 4 steps", page, err)
		}
		for _, j := range page.Jobs {
			if j.State != engine.JobCompleted || j.RunID != run || j.FinishedAt == 0 {
				t.Errorf("finished job = %+v", j)
			}
		}
		if j, err := e.QueueJob(ctx, "default", run+":final"); err != nil || j.State != engine.JobCompleted {
			t.Fatalf("finished job = %+v, %v", j, err)
		}
		if _, err := e.QueueJob(ctx, "default", run+":nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown job: %v, want ErrNotFound", err)
		}
		if _, err := e.Queue(ctx, "other"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown queue: %v, want ErrNotFound", err)
		}
		if _, err := e.AddJob(ctx, "other", "dia", nil); !errors.Is(err, engine.ErrNotEntryQueue) {
			t.Fatalf("AddJob on another queue: %v, want ErrNotEntryQueue", err)
		}
		added, err := e.AddJob(ctx, "default", "dia", json.RawMessage(`{"n":2}`))
		if err != nil || added.Queue != "default" || added.Step != "start" {
			t.Fatalf("AddJob = %+v, %v", added, err)
		}
	})
}

// TestQueuePauseSharedByInstances: a pause made through one nqd instance
// holds for another sharing the Redis store, and for an instance started
// after it; the resume reaches a claim already waiting on the other one.
func TestQueuePauseSharedByInstances(t *testing.T) {
	ctx := t.Context()
	prefix := redistest.Prefix(t)
	a := engine.New(backendtest.OpenRedis(t, prefix), engine.Options{PollInterval: 20 * time.Millisecond})
	b := engine.New(backendtest.OpenRedis(t, prefix), engine.Options{PollInterval: 20 * time.Millisecond})
	mustDefine(t, a, "dia", "diamond")
	if err := a.SetQueuePaused(ctx, "default", true); err != nil {
		t.Fatal(err)
	}
	started, err := a.Start(ctx, "dia", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if jobs, err := b.Claim(ctx, []string{"default"}, 5, 100*time.Millisecond); err != nil || len(jobs) != 0 {
		t.Fatalf("another instance claimed %v, %v from the paused queue", jobs, err)
	}
	later := engine.New(backendtest.OpenRedis(t, prefix), engine.Options{})
	if q, err := later.Queue(ctx, "default"); err != nil || !q.Paused || q.Counts.Paused != 1 {
		t.Fatalf("a new instance sees %+v, %v; want the queue paused with one job", q, err)
	}

	claimed := make(chan []store.Job, 1)
	go func() {
		jobs, _ := b.Claim(ctx, []string{"default"}, 5, 20*time.Second)
		claimed <- jobs
	}()
	if err := a.SetQueuePaused(ctx, "default", false); err != nil {
		t.Fatal(err)
	}
	select {
	case jobs := <-claimed:
		if len(jobs) != 1 || jobs[0].ID != started.ID {
			t.Fatalf("after the resume the waiting claim got %v, want %s", jobs, started.ID)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting claim got nothing after the resume")
	}
}
