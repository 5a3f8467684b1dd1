package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
)

// TestResubscribeBeforeUnsubscribe: a subscriber that comes back to a
// channel whose UNSUBSCRIBE has not been written yet is confirmed without a
// SUBSCRIBE of its own, and still receives every event appended after its
// Subscribe returned. The delay is an hour here, so every return happens
// inside it.
func TestResubscribeBeforeUnsubscribe(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t, redistest.Options{}) // its own, so the counts are this test's
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	s, err := New(client, Options{Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	s.feed.unsubDelay = time.Hour

	c := store.Context{Type: "flow", ID: "run-back"}
	for round := range 5 {
		sub, err := s.Subscribe(ctx, c, 4)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Append(ctx, c, []event.Event{{Kind: "log", Subject: c.ID}}, store.AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		got, err := store.Receive(rctx, sub)
		cancel()
		if err != nil || got.ID != res.Events[0].ID {
			t.Fatalf("round %d: received %v, %v; want %v", round, got.ID, err, res.Events[0].ID)
		}
		sub.Close()
	}

	stats, err := client.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stats, "cmdstat_subscribe:calls=1,") || strings.Contains(stats, "cmdstat_unsubscribe:") {
		t.Errorf("want one SUBSCRIBE and no UNSUBSCRIBE for five subscribers in turn; commandstats:\n%s", stats)
	}
	n, err := client.PubSubNumSub(ctx, s.channel(c)).Result()
	if err != nil || n[s.channel(c)] != 1 {
		t.Errorf("Redis subscribers of the channel = %v, %v; want 1 until the delay passes", n, err)
	}
}
