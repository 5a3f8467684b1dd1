package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/redisstore"
)

func newFlakyStore(t *testing.T) (*redisstore.Store, *redistest.Flaky) {
	t.Helper()
	f := &redistest.Flaky{}
	client := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), MaxRetries: -1, DialerRetries: 1, Dialer: f.Dial})
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisstore.New(client, redisstore.Options{Prefix: redistest.Prefix(t), Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, f
}

func TestLostReplyIsResolved(t *testing.T) {
	for _, tt := range []struct {
		name  string
		fault int
		key   string
	}{
		{"reply lost, no key", redistest.LoseReply, ""},
		{"call lost, no key", redistest.LoseCall, ""},
		{"reply lost, a client key", redistest.LoseReply, "k1"},
		{"call lost, a client key", redistest.LoseCall, "k1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, f := newFlakyStore(t)
			c := store.Context{Type: "flow", ID: "run-1"}
			batch := []event.Event{{Kind: "a.b", Subject: c.ID}, {Kind: "a.c", Subject: c.ID}}
			// Loads the script, so that each call below is one EVALSHA.
			if _, err := s.Append(t.Context(), store.Context{Type: "flow", ID: "warm"}, batch[:1], store.AppendOptions{}); err != nil {
				t.Fatal(err)
			}
			f.ResetCalls()
			f.Arm(tt.fault)
			res, err := s.Append(t.Context(), c, batch, store.AppendOptions{IdempotencyKey: tt.key, SameRequest: tt.key != ""})
			if err != nil {
				t.Fatalf("Append with a lost %s = %v, want the true outcome", tt.name, err)
			}
			if res.Replayed != (tt.fault == redistest.LoseReply && tt.key != "") {
				t.Errorf("Replayed = %v", res.Replayed)
			}
			stored, err := s.Range(t.Context(), c, store.RangeQuery{})
			if err != nil {
				t.Fatal(err)
			}
			if len(stored) != 2 || len(res.Events) != 2 || stored[0].ID != res.Events[0].ID || stored[1].ID != res.Events[1].ID {
				t.Errorf("answered %v, stored %v: want the batch stored once, with the ids answered", res.Events, stored)
			}
			// The lost call ran, or was sent again; either way once more at most.
			if n := f.Calls(); n < 1 || n > 2 {
				t.Errorf("%d script calls reached Redis", n)
			}
		})
	}
}

func TestUnresolvedAppendIsUnknown(t *testing.T) {
	s, f := newFlakyStore(t)
	c := store.Context{Type: "flow", ID: "run-1"}
	ev := []event.Event{{Kind: "a.b", Subject: c.ID}}

	// Redis cannot be reached at all: nothing was sent, nothing stored.
	f.SetDown(true)
	start := time.Now()
	idle, err := s.Append(t.Context(), c, ev, store.AppendOptions{})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Append with Redis down = %+v, %v; want ErrUnavailable", idle, err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("an append that was never sent took %v to fail", waited)
	}
	f.SetDown(false)
	if info, err := s.Info(t.Context(), c); err != nil || info.Length != 0 {
		t.Fatalf("Info = %+v, %v; want nothing stored", info, err)
	}

	// The reply is lost and Redis stays out of reach until the deadline.
	f.Arm(redistest.LoseReplyAndGoDown)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, err = s.Append(ctx, c, ev, store.AppendOptions{IdempotencyKey: "k1", SameRequest: true})
	if !errors.Is(err, store.ErrOutcomeUnknown) {
		t.Fatalf("Append whose reply was lost, Redis gone = %v, want ErrOutcomeUnknown", err)
	}
	f.SetDown(false)
	// The retry the error asks for, with the same key, finds what happened.
	res, err := s.Append(t.Context(), c, ev, store.AppendOptions{IdempotencyKey: "k1", SameRequest: true})
	if err != nil || !res.Replayed {
		t.Fatalf("retry = %+v, %v; want the lost append replayed", res, err)
	}
	if info, err := s.Info(t.Context(), c); err != nil || info.Length != 1 {
		t.Errorf("Info = %+v, %v; want the one event", info, err)
	}
}

// TestWriteWithLostReplyIsUnknown: a write other than an append whose reply
// is lost is not reported as "nothing written".
func TestWriteWithLostReplyIsUnknown(t *testing.T) {
	s, f := newFlakyStore(t)
	if _, err := s.Put(t.Context(), "warm", map[string]string{"a": "1"}, 0); err != nil {
		t.Fatal(err)
	}
	f.Arm(redistest.LoseReplyAndGoDown)
	_, err := s.Put(t.Context(), "k1", map[string]string{"a": "1"}, 0)
	if !errors.Is(err, store.ErrOutcomeUnknown) {
		t.Fatalf("Put whose reply was lost = %v, want ErrOutcomeUnknown", err)
	}
	// Redis is now out of reach: nothing is sent, which is ErrUnavailable.
	if _, err := s.Put(t.Context(), "k2", map[string]string{"a": "1"}, 0); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Put with Redis down = %v, want ErrUnavailable", err)
	}
	f.SetDown(false)
	if rec, err := s.Get(t.Context(), "k1"); err != nil || rec.Fields["a"] != "1" {
		t.Errorf("Get(k1) = %+v, %v: the lost write ran", rec, err)
	}
}

// enqueueJobs starts run r1 of flow fl with jobs a, b and c ready in queue q.
func enqueueJobs(t *testing.T, s *redisstore.Store) store.RunMeta {
	t.Helper()
	m := store.RunMeta{FlowName: "fl", RunID: "r1", Status: store.RunRunning, StartedAt: 1, StepCount: 3}
	var jobs []store.Job
	for _, step := range []string{"a", "b", "c"} {
		jobs = append(jobs, store.Job{ID: store.JobID("r1", step), Queue: "q", FlowName: "fl", RunID: "r1", Step: step, ReadyAt: 1})
	}
	if _, err := s.UpdateRun(t.Context(), store.RunUpdate{Meta: m, Enqueue: jobs}); err != nil {
		t.Fatal(err)
	}
	m.Version = 1
	return m
}

func jobIDs(jobs []store.Job) []string {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID + "@" + j.Lease
	}
	return ids
}

// TestLostClaimReplyAnswersTheSameJobs: a claim whose reply is lost is sent
// again under its lease and answers the jobs it took, taking no more, so
// none stays leased to nobody.
func TestLostClaimReplyAnswersTheSameJobs(t *testing.T) {
	for _, tt := range []struct {
		name  string
		fault int
	}{
		{"reply lost", redistest.LoseReply},
		{"call lost", redistest.LoseCall},
		{"sent twice", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, f := newFlakyStore(t)
			enqueueJobs(t, s)
			// Loads the script, so that each call below is one EVALSHA.
			if _, err := s.Claim(t.Context(), []string{"warm"}, 10, 1000, "L0", 1); err != nil {
				t.Fatal(err)
			}
			f.ResetCalls()
			f.Arm(tt.fault)
			got, err := s.Claim(t.Context(), []string{"q"}, 10, 1000, "L1", 2)
			if err != nil {
				t.Fatalf("Claim with a %s = %v, want its jobs", tt.name, err)
			}
			if diff := cmp.Diff([]string{"r1:a@L1", "r1:b@L1"}, jobIDs(got)); diff != "" {
				t.Fatalf("Claim (-want +got):\n%s", diff)
			}
			if tt.fault == 0 {
				// The same claim again, as a resend after a lost reply is.
				again, err := s.Claim(t.Context(), []string{"q"}, 10, 1000, "L1", 2)
				if err != nil || !cmp.Equal(got, again) {
					t.Fatalf("the claim again = %+v, %v; want %+v", again, err, got)
				}
			} else if n := f.Calls(); n < 1 || n > 2 {
				t.Errorf("%d script calls reached Redis", n)
			}
			rest, err := s.Claim(t.Context(), []string{"q"}, 10, 1000, "L2", 10)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"r1:c@L2"}, jobIDs(rest)); diff != "" {
				t.Errorf("another claim (-want +got):\n%s", diff)
			}
		})
	}
}

// TestClaimAgainAnswersWhatTheLeaseHolds: a claim sent again answers only the
// jobs its lease still holds, and one that took nothing claims afresh.
func TestClaimAgainAnswersWhatTheLeaseHolds(t *testing.T) {
	s, _ := newFlakyStore(t)
	m := enqueueJobs(t, s)
	if got, err := s.Claim(t.Context(), []string{"empty"}, 10, 1000, "L1", 2); err != nil || len(got) != 0 {
		t.Fatalf("Claim of an empty queue = %+v, %v", got, err)
	}
	got, err := s.Claim(t.Context(), []string{"q"}, 10, 1000, "L1", 2)
	if err != nil || len(got) != 2 {
		t.Fatalf("Claim under a lease that took nothing = %+v, %v; want two jobs", got, err)
	}
	if _, err := s.UpdateRun(t.Context(), store.RunUpdate{Meta: m, PrevStatus: m.Status, Ack: &store.JobAck{Queue: "q", ID: "r1:a", Lease: "L1"}}); err != nil {
		t.Fatal(err)
	}
	again, err := s.Claim(t.Context(), []string{"q"}, 10, 1000, "L1", 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"r1:b@L1"}, jobIDs(again)); diff != "" {
		t.Errorf("the claim again after r1:a was acknowledged (-want +got):\n%s", diff)
	}
}

// TestLostRunUpdateReplyAnswersAsTheFirst: a run update whose reply is lost
// is sent again and answered as the first run was, with its events and the
// jobs it claimed, rather than refused for the version it wrote itself.
func TestLostRunUpdateReplyAnswersAsTheFirst(t *testing.T) {
	for _, fault := range []int{redistest.LoseReply, redistest.LoseCall} {
		t.Run(strconv.Itoa(fault), func(t *testing.T) {
			s, f := newFlakyStore(t)
			m := enqueueJobs(t, s)
			held, err := s.Claim(t.Context(), []string{"q"}, 10, 1000, "L1", 1)
			if err != nil || len(held) != 1 {
				t.Fatalf("Claim = %+v, %v", held, err)
			}
			done := event.Event{Kind: "step.completed", Subject: "r1", RunID: "r1", FlowName: "fl", Step: "a"}
			u := store.RunUpdate{Meta: m, PrevStatus: m.Status, Events: []event.Event{done},
				Ack:   &store.JobAck{Queue: "q", ID: "r1:a", Lease: "L1"},
				Claim: &store.ClaimRequest{Queues: []string{"q"}, Now: 10, LeaseUntil: 1000, Lease: "L2", Max: 1}}
			f.ResetCalls()
			f.Arm(fault)
			res, err := s.UpdateRun(t.Context(), u)
			if err != nil {
				t.Fatalf("UpdateRun whose reply was lost = %v, want its answer", err)
			}
			if n := f.Calls(); n < 1 || n > 2 {
				t.Errorf("%d script calls reached Redis", n)
			}
			if diff := cmp.Diff([]string{"r1:b@L2"}, jobIDs(res.Claimed)); diff != "" {
				t.Errorf("claimed (-want +got):\n%s", diff)
			}
			stored, err := s.Range(t.Context(), store.Context{Type: "flow", ID: "r1"}, store.RangeQuery{})
			if err != nil {
				t.Fatal(err)
			}
			if len(stored) != 1 || len(res.Events) != 1 || stored[0].ID != res.Events[0].ID {
				t.Errorf("answered %+v, stored %+v: want the event stored once, with the id answered", res.Events, stored)
			}
			if got, err := s.RunMeta(t.Context(), "fl", "r1"); err != nil || got.Version != 2 {
				t.Errorf("RunMeta = %+v, %v; want version 2", got, err)
			}
		})
	}
}

// TestLostHeartbeatReplyIsSentAgain: a heartbeat whose reply is lost is sent
// again, which extends the same lease to the same end.
func TestLostHeartbeatReplyIsSentAgain(t *testing.T) {
	s, f := newFlakyStore(t)
	enqueueJobs(t, s)
	if _, err := s.Claim(t.Context(), []string{"q"}, 10, 1000, "L1", 1); err != nil {
		t.Fatal(err)
	}
	ref := store.JobAck{Queue: "q", ID: "r1:a", Lease: "L1"}
	if _, err := s.Heartbeat(t.Context(), ref, 1500); err != nil {
		t.Fatal(err)
	}
	f.Arm(redistest.LoseReply)
	j, err := s.Heartbeat(t.Context(), ref, 2000)
	if err != nil || j.Lease != "L1" || j.LeaseUntil != 2000 {
		t.Fatalf("Heartbeat whose reply was lost = %+v, %v; want the lease held until 2000", j, err)
	}
}
