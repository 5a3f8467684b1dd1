package stream

import (
	"context"
	"net/http"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/redisstore"
)

func init() {
	backends = append(backends, backend{name: "redis", open: func(t *testing.T) store.Store {
		return newRedisStore(t, redistest.Prefix(t))
	}}, backend{name: "redis-cluster", open: func(t *testing.T) store.Store {
		return newClusterStore(t, redistest.ClusterPrefix(t), 1)
	}}, backend{name: "redis-shards", open: func(t *testing.T) store.Store {
		return newShardedStore(t, redistest.Prefix(t), 4)
	}}, backend{name: "redis-cluster-shards", open: func(t *testing.T) store.Store {
		return newClusterStore(t, redistest.ClusterPrefix(t), 9)
	}})
}

// newClusterStore is newRedisStore on the shared test cluster, its keys
// split over shards: the stream is served through sharded Pub/Sub.
func newClusterStore(t testing.TB, prefix string, shards int) *prefixed {
	t.Helper()
	client := redistest.NewClusterClient(t, redistest.ClusterURL(t))
	s, err := redisstore.New(client, redisstore.Options{Prefix: prefix, Shards: shards, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("redis cluster store: %v", err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		_ = client.Close()
	})
	return &prefixed{Store: s, prefix: prefix}
}

// newRedisStore is one nqd instance's Redis store: its own client, so its
// own Pub/Sub connection, on the shared test server.
func newRedisStore(t testing.TB, prefix string) *prefixed {
	t.Helper()
	return newShardedStore(t, prefix, 1)
}

// newShardedStore is newRedisStore with its keys split over shards.
func newShardedStore(t testing.TB, prefix string, shards int) *prefixed {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	s, err := redisstore.New(client, redisstore.Options{Prefix: prefix, Shards: shards, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("redis store: %v", err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		_ = client.Close()
	})
	return &prefixed{Store: s, prefix: prefix}
}

// TestTwoInstances appends through one instance and streams from another
// sharing the same Redis.
func TestTwoInstances(t *testing.T) {
	prefix := redistest.Prefix(t)
	writer, reader := newRedisStore(t, prefix), newRedisStore(t, prefix)
	srv := newTestServer(t, newTestHandler(t, reader, Options{}))
	c := newContext(t)
	old := appendN(t, writer, c, 2)
	conn := dial(t, streamURL(srv, c), nil)
	if got, want := msgIDs(conn.readEvents(t, 2)), ids(old); !slices.Equal(got, want) {
		t.Fatalf("backfill: got %v, want %v", got, want)
	}
	live := appendN(t, writer, c, 3)
	if got, want := msgIDs(conn.readEvents(t, 3)), ids(live); !slices.Equal(got, want) {
		t.Errorf("live through the other instance: got %v, want %v", got, want)
	}
}

// TestResetAfterTrim resumes from an event that retention removed.
func TestResetAfterTrim(t *testing.T) {
	prefix := redistest.Prefix(t)
	s := newRedisStore(t, prefix)
	srv := newTestServer(t, newTestHandler(t, s, Options{}))
	c := newContext(t)
	evs := appendN(t, s, c, 10)
	client := redistest.Client(t)
	if err := client.XTrimMaxLen(context.Background(), prefix+":"+c.Type+":"+c.ID, 4).Err(); err != nil {
		t.Fatalf("XTRIM: %v", err)
	}
	conn := dial(t, streamURL(srv, c), http.Header{"Last-Event-Id": {evs[2].ID.String()}})
	end := evs[9].ID.String()
	if m := conn.nextData(t); m.Event != "reset" || m.ID != end {
		t.Fatalf("got %+v, want a reset at %s", m, end)
	}
	// A retained position still resumes exactly.
	conn = dial(t, streamURL(srv, c), http.Header{"Last-Event-Id": {evs[7].ID.String()}})
	if got, want := msgIDs(conn.readEvents(t, 2)), ids(evs[8:]); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestRedisLiveNeedsNoReads: Redis publishes each event with the id of the
// entry before it, so the hub proves that every live event follows the last
// one it sent without reading the stream, even when they are milliseconds
// apart (where ids alone prove nothing).
func TestRedisLiveNeedsNoReads(t *testing.T) {
	s := newRedisStore(t, redistest.Prefix(t))
	rc := &readCounter{Source: s}
	h := NewHandler(Options{Store: rc, Log: testLogger(t), CheckInterval: -1})
	srv := newTestServer(t, h)
	c := newContext(t)
	old := appendN(t, s, c, 2)
	conn := dial(t, streamURL(srv, c), nil)
	if got, want := msgIDs(conn.readEvents(t, 2)), ids(old); !slices.Equal(got, want) {
		t.Fatalf("backfill: got %v, want %v", got, want)
	}
	eventually(t, "the stream attaches", func() bool { return topicSubs(h, c) == 1 })
	reads := rc.ranges.Load()
	last := old[len(old)-1].ID
	var live []event.Event
	for range 5 {
		// The next millisecond, so that its id has sequence 0.
		for uint64(time.Now().UnixMilli()) <= last.MS {
			runtime.Gosched()
		}
		ev := appendN(t, s, c, 1)[0]
		if ev.ID.Seq != 0 {
			t.Fatalf("appended %s, want a millisecond of its own", ev.ID)
		}
		live, last = append(live, ev), ev.ID
	}
	if got, want := msgIDs(conn.readEvents(t, len(live))), ids(live); !slices.Equal(got, want) {
		t.Fatalf("live: got %v, want %v", got, want)
	}
	if r := rc.ranges.Load() - reads; r != 0 {
		t.Errorf("the hub read the stream %d times for %d live events, want none", r, len(live))
	}
}
