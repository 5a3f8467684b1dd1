package redistest_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/internal/redistest"
)

func TestPrefixCleanupDeletesOnlyItsKeys(t *testing.T) {
	ctx := context.Background()
	c := redistest.Client(t)
	var p string
	t.Run("inner", func(t *testing.T) {
		p = redistest.Prefix(t)
		if err := c.Set(ctx, p+":a", "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.Set(ctx, p+"0:b", "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
	})
	if n, err := c.Exists(ctx, p+":a").Result(); err != nil || n != 0 {
		t.Errorf("key under the prefix: exists=%d err=%v, want deleted", n, err)
	}
	// A prefix that merely starts with p belongs to someone else.
	if n, err := c.Exists(ctx, p+"0:b").Result(); err != nil || n != 1 {
		t.Errorf("foreign key: exists=%d err=%v, want kept", n, err)
	}
	c.Del(ctx, p+"0:b")
}

func TestRestartKeepsAOFData(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{AOF: true})
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("ping after Kill succeeded")
	}
	s.Restart(t)
	got, err := c.Get(ctx, "k").Result()
	if err != nil || got != "v" {
		t.Fatalf("after restart: got %q, %v, want v", got, err)
	}
}

func TestClusterServesEverySlot(t *testing.T) {
	ctx := context.Background()
	c := redistest.ClusterClient(t)
	p := redistest.ClusterPrefix(t)
	// Keys of one tag share a slot, so a transaction over them is allowed.
	_, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, "{"+p+"}:a", "1", 0)
		pipe.Set(ctx, "{"+p+"}:b", "2", 0)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var primaries atomic.Int32
	err = c.ForEachMaster(ctx, func(context.Context, *redis.Client) error { primaries.Add(1); return nil })
	if err != nil || primaries.Load() != 3 {
		t.Fatalf("primaries: %d, %v; want 3", primaries.Load(), err)
	}
}
