package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

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
