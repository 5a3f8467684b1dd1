package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/redisstore"
)

// TestConcurrentAppendsPipelined runs many appends at once, with and without
// idempotency keys, over contexts they share, on a Redis of its own whose
// scripts are flushed halfway: every append is answered with the ids it
// stored, each context holds exactly what was answered, in the order of its
// ids, and a repeat of a keyed append replays its own ids.
func TestConcurrentAppendsPipelined(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	counter := &redisstore.ScriptPipelines{}
	client.AddHook(counter)
	s, err := redisstore.New(client, redisstore.Options{Prefix: "p", Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })

	const writers, each, contexts = 32, 20, 4
	type answer struct {
		c   store.Context
		key string
		ids []event.ID
	}
	answers := make(chan answer, writers*each)
	run := func(from, to int) {
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := from; i < to; i++ {
					c := store.Context{Type: "flow", ID: fmt.Sprintf("run-%d", (w+i)%contexts)}
					opts := store.AppendOptions{}
					if i%2 == 0 {
						opts = store.AppendOptions{IdempotencyKey: fmt.Sprintf("k-%d-%d", w, i), SameRequest: true}
					}
					batch := []event.Event{
						{Kind: "step.started", Subject: c.ID, Data: []byte(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))},
						{Kind: "step.completed", Subject: c.ID},
					}
					res, err := s.Append(t.Context(), c, batch, opts)
					if err != nil || res.Replayed || len(res.Events) != 2 {
						t.Errorf("Append = %+v, %v", res, err)
						return
					}
					answers <- answer{c, opts.IdempotencyKey, []event.ID{res.Events[0].ID, res.Events[1].ID}}
				}
			})
		}
		wg.Wait()
	}
	run(0, each/2)
	if err := client.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	run(each/2, each)
	close(answers)

	answered := map[store.Context]map[event.ID]bool{}
	var keyed []answer
	for a := range answers {
		if answered[a.c] == nil {
			answered[a.c] = map[event.ID]bool{}
		}
		for _, id := range a.ids {
			if answered[a.c][id] {
				t.Fatalf("%s: id %v answered twice", a.c, id)
			}
			answered[a.c][id] = true
		}
		// A batch is stored whole and contiguous: no other append's event
		// falls between its two.
		if a.ids[0].Compare(a.ids[1]) >= 0 {
			t.Errorf("%s: batch ids %v out of order", a.c, a.ids)
		}
		if a.key != "" {
			keyed = append(keyed, a)
		}
	}
	total := 0
	for c, ids := range answered {
		stored, err := s.Range(t.Context(), c, store.RangeQuery{})
		if err != nil {
			t.Fatal(err)
		}
		total += len(stored)
		if len(stored) != len(ids) {
			t.Errorf("%s: %d events stored, %d answered", c, len(stored), len(ids))
		}
		for i, e := range stored {
			if !ids[e.ID] {
				t.Errorf("%s: stored %v was never answered", c, e.ID)
			}
			if i%2 == 1 && (e.Kind != "step.completed" || stored[i-1].Kind != "step.started") {
				t.Errorf("%s: events %d and %d are %s, %s: a batch was split", c, i-1, i, stored[i-1].Kind, e.Kind)
			}
		}
	}
	if total != 2*writers*each {
		t.Errorf("%d events stored, want %d", total, 2*writers*each)
	}
	for _, a := range keyed[:10] {
		res, err := s.Append(t.Context(), a.c, []event.Event{{Kind: "step.started", Subject: a.c.ID}}, store.AppendOptions{IdempotencyKey: a.key})
		if err != nil || !res.Replayed || len(res.Events) != 2 || res.Events[0].ID != a.ids[0] || res.Events[1].ID != a.ids[1] {
			t.Errorf("repeat of %s = %+v, %v; want the replay of %v", a.key, res, err, a.ids)
		}
	}
	pipelines, cmds := counter.Counts()
	if cmds < writers*each {
		t.Errorf("%d commands in pipelines, want every append's script call (%d) there", cmds, writers*each)
	}
	t.Logf("%d script calls in %d pipelines", cmds, pipelines)
}

// TestAppendNotSent: an append whose context ended before it was sent, or
// made after Close, stores nothing and says so: it is not outcome unknown.
func TestAppendNotSent(t *testing.T) {
	s, _ := newTestStore(t, redisstore.Options{})
	c := store.Context{Type: "flow", ID: "run-1"}
	ev := []event.Event{{Kind: "a.b", Subject: c.ID}}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Append(ctx, c, ev, store.AppendOptions{}); !errors.Is(err, context.Canceled) || errors.Is(err, store.ErrOutcomeUnknown) {
		t.Fatalf("Append with an ended context = %v, want context.Canceled", err)
	}
	if info, err := s.Info(t.Context(), c); err != nil || info.Length != 0 {
		t.Fatalf("Info = %+v, %v; want nothing stored", info, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(t.Context(), c, ev, store.AppendOptions{}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Append after Close = %v, want ErrClosed", err)
	}
}

// TestLostPipelineIsResolved loses the reply (or the calls) of a pipeline
// while many appends are on their way: every append of it learns its true
// outcome under its idempotency key, and each batch is stored exactly once.
func TestLostPipelineIsResolved(t *testing.T) {
	for _, fault := range []int{redistest.LoseReply, redistest.LoseCall} {
		t.Run(fmt.Sprint(fault), func(t *testing.T) {
			s, f := newFlakyStore(t)
			c := store.Context{Type: "flow", ID: "run-1"}
			if _, err := s.Append(t.Context(), c, []event.Event{{Kind: "a.warm", Subject: c.ID}}, store.AppendOptions{}); err != nil {
				t.Fatal(err)
			}
			const writers = 16
			f.Arm(fault)
			answered := make([][]event.Event, writers)
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					opts := store.AppendOptions{}
					if w%2 == 0 {
						opts = store.AppendOptions{IdempotencyKey: fmt.Sprintf("k-%d", w), SameRequest: true}
					}
					batch := []event.Event{{Kind: "a.b", Subject: c.ID}, {Kind: "a.c", Subject: c.ID}}
					res, err := s.Append(t.Context(), c, batch, opts)
					if err != nil || len(res.Events) != 2 {
						t.Errorf("writer %d: Append = %+v, %v; want the true outcome", w, res, err)
						return
					}
					if res.Replayed && opts.IdempotencyKey == "" {
						t.Errorf("writer %d: an append without a key answered as a replay", w)
					}
					answered[w] = res.Events
				})
			}
			wg.Wait()
			stored, err := s.Range(t.Context(), c, store.RangeQuery{})
			if err != nil {
				t.Fatal(err)
			}
			if len(stored) != 1+2*writers {
				t.Fatalf("%d events stored, want the warm-up and %d batches of 2 once each", len(stored), writers)
			}
			at := map[event.ID]int{}
			for i, e := range stored {
				at[e.ID] = i
			}
			for w, evs := range answered {
				i, ok := at[evs[0].ID]
				if !ok || i+1 >= len(stored) || stored[i+1].ID != evs[1].ID {
					t.Errorf("writer %d was answered %v, which is not a stored batch", w, evs)
				}
			}
		})
	}
}
