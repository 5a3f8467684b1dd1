package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/redisstore"
	"github.com/nqd-dev/nqd/store/storetest"
)

// TestConformanceOnCluster runs the suite on a Redis Cluster of three
// primaries with a replica each: with one shard every scenario's prefix is
// a slot of its own, so the scenarios spread over the primaries; with nine
// (three per primary) every scenario's keys do, and a script whose keys
// crossed slots would fail with CROSSSLOT.
func TestConformanceOnCluster(t *testing.T) {
	for _, shards := range []int{1, 9} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			storetest.RunAll(t, func(t *testing.T, opts storetest.Options) storetest.Harness {
				client := redistest.ClusterClient(t)
				prefix := redistest.ClusterPrefix(t)
				open := func() store.Backend {
					s, err := redisstore.New(client, redisstore.Options{Prefix: prefix, Retention: opts.Retention, Shards: shards, Logger: testkit.Logger(t)})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = s.Close() })
					return s
				}
				// Reopen is a second instance on the same cluster and prefix.
				return storetest.Harness{Store: open(), Reopen: open}
			})
		})
	}
}

// TestWaitReplicas: with WaitReplicas an append is acknowledged once the
// replica of its shard has it, and one that cannot reach as many replicas
// as asked for fails as outcome unknown (it is stored on the primary only).
func TestWaitReplicas(t *testing.T) {
	ctx := context.Background()
	client := redistest.ClusterClient(t)
	open := func(replicas int) *redisstore.Store {
		s, err := redisstore.New(client, redisstore.Options{
			Prefix: redistest.ClusterPrefix(t), Logger: testkit.Logger(t),
			WaitReplicas: replicas, WaitTimeout: 200 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	c := store.Context{Type: "flow", ID: "r1"}
	ev := []event.Event{{Kind: "log", Subject: "r1"}}
	if _, err := open(1).Append(ctx, c, ev, store.AppendOptions{}); err != nil {
		t.Fatalf("append waiting for the one replica: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := open(2).Append(short, c, ev, store.AppendOptions{IdempotencyKey: "k"})
	if !errors.Is(err, store.ErrOutcomeUnknown) {
		t.Fatalf("append waiting for two replicas of a shard that has one: %v, want outcome unknown", err)
	}
}

// TestClusterSlotUnserved: while no node serves the store's slot (its
// primary and its replica are both down), an append is sent again until
// shortly before its deadline and then fails as unavailable, nothing
// stored, as on a single Redis that is down.
func TestClusterSlotUnserved(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{})
	client := redistest.NewClusterClient(t, cl.URL())
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisstore.New(client, redisstore.Options{Prefix: "nqu", Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c := store.Context{Type: "flow", ID: "r1"}
	ev := []event.Event{{Kind: "log", Subject: "r1"}}
	if _, err := s.Append(context.Background(), c, ev, store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	primary, err := cl.PrimaryOf(context.Background(), "{nqu}")
	if err != nil {
		t.Fatal(err)
	}
	replica := cl.ReplicaOf(context.Background(), primary)
	if replica == nil {
		t.Fatal("the primary has no replica")
	}
	primary.Kill()
	replica.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := s.Append(ctx, c, ev, store.AppendOptions{}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("append while the slot is unserved: %v, want unavailable", err)
	}
}
