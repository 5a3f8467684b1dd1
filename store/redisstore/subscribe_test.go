package redisstore

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	s.home().feed.unsubDelay = time.Hour

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
	n, err := client.PubSubNumSub(ctx, s.home().channel(c)).Result()
	if err != nil || n[s.home().channel(c)] != 1 {
		t.Errorf("Redis subscribers of the channel = %v, %v; want 1 until the delay passes", n, err)
	}
}

// A published record decodes to the event its JSON holds, with the prev the
// script put in front of it, whether or not it has one; a record in another
// shape still decodes, without a prev.
func TestDecodePublished(t *testing.T) {
	evs := []event.Event{
		{
			ID: event.ID{MS: 1764107745123, Seq: 2}, Kind: "step.failed", Subject: "r1", RunID: "r1", FlowName: "billing",
			Step: "charge", Attempt: 3, Trigger: "t-1", CorrelationID: "c-1",
			Data: json.RawMessage(`{"q":"<a & b>","é":[1,2.5,null]}`), Meta: json.RawMessage(`{"attempt":3}`),
		},
		{ID: event.ID{MS: 1764107745124}, Kind: "log", Subject: "r1"},
	}
	prev := event.ID{MS: 1764107745100, Seq: 7}
	for _, e := range evs {
		rec, err := e.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		id := `{"id":"` + e.ID.String() + `",`
		withPrev := id + `"prev":"` + prev.String() + `",` + strings.TrimPrefix(string(rec), id)
		reordered := `{"kind":` + strconv.Quote(e.Kind) + `,"id":"` + e.ID.String() + `","subject":"r1"}`
		for _, c := range []struct {
			payload string
			prev    event.ID
		}{{string(rec), event.ID{}}, {withPrev, prev}, {reordered, event.ID{}}} {
			var want event.Event
			if err := want.UnmarshalJSON([]byte(c.payload)); err != nil {
				t.Fatal(err)
			}
			want.Prev = c.prev
			got, err := decodePublished(c.payload)
			if err != nil {
				t.Fatalf("decodePublished(%s): %v", c.payload, err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("decodePublished(%s) (-want +got):\n%s", c.payload, d)
			}
		}
	}
	if _, err := decodePublished(`{"id":"1-0","kind":`); err == nil {
		t.Error("decodePublished of a cut record: no error")
	}
}
