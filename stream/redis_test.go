package stream

import (
	"context"
	"net/http"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/internal/redistest"
)

// TestTwoInstances appends through one instance and streams from another
// sharing the same Redis.
func TestTwoInstances(t *testing.T) {
	prefix := redistest.Prefix(t)
	writer, reader := backendtest.OpenRedis(t, prefix), backendtest.OpenRedis(t, prefix)
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
	s := backendtest.OpenRedis(t, prefix)
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
	s := backendtest.OpenRedis(t, "")
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
