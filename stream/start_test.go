package stream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/store"
)

// readCounter counts a source's reads of the stream; its first Range call
// waits for gate, when set, and fails with failFirst.
type readCounter struct {
	Source
	infos, ranges atomic.Int32
	gate          chan struct{}
	failFirst     error
}

func (r *readCounter) Info(ctx context.Context, c store.Context) (store.StreamInfo, error) {
	r.infos.Add(1)
	return r.Source.Info(ctx, c)
}

func (r *readCounter) Range(ctx context.Context, c store.Context, q store.RangeQuery) ([]event.Event, error) {
	if r.ranges.Add(1) == 1 && r.gate != nil {
		<-r.gate
		if r.failFirst != nil {
			return nil, r.failFirst
		}
	}
	return r.Source.Range(ctx, c, q)
}

// TestTopicStartReads: a stream that starts its context's topic reads the
// stream's end once, for itself and the topic: a live-only stream one Info,
// a backfill one Range and no Info. Later streams of the context read only
// their own backfill, and every stream gets the live events once.
func TestTopicStartReads(t *testing.T) {
	for _, tc := range []struct {
		query                string
		infos, ranges, first int32 // reads of the first stream; events it backfills
	}{
		{"?backfill=0", 1, 0, 0},
		{"?backfill=2", 0, 1, 2},
		{"", 0, 1, 3},
	} {
		t.Run("stream"+tc.query, func(t *testing.T) {
			s := newBoltStore(t)
			rc := &readCounter{Source: s}
			h := NewHandler(Options{Store: rc, Log: testLogger(t), CheckInterval: -1})
			srv := newTestServer(t, h)
			c := newContext(t)
			old := appendN(t, s, c, 3)
			first := dial(t, streamURL(srv, c)+tc.query, nil)
			if got, want := msgIDs(first.readEvents(t, int(tc.first))), ids(old[3-tc.first:]); !slices.Equal(got, want) {
				t.Fatalf("backfill: got %v, want %v", got, want)
			}
			eventually(t, "the stream attaches", func() bool { return topicSubs(h, c) == 1 })
			if i, r := rc.infos.Load(), rc.ranges.Load(); i != tc.infos || r != tc.ranges {
				t.Errorf("the first stream and its topic read Info %d and Range %d times, want %d and %d", i, r, tc.infos, tc.ranges)
			}
			second := dial(t, streamURL(srv, c)+tc.query, nil)
			second.readEvents(t, int(tc.first))
			eventually(t, "the second stream attaches", func() bool { return topicSubs(h, c) == 2 })
			if i, r := rc.infos.Load(), rc.ranges.Load(); i != 2*tc.infos || r != 2*tc.ranges {
				t.Errorf("after the second stream: Info %d and Range %d times, want %d and %d", i, r, 2*tc.infos, 2*tc.ranges)
			}
			live := appendN(t, s, c, 3)
			for _, conn := range []*sseConn{first, second} {
				if got, want := msgIDs(conn.readEvents(t, 3)), ids(live); !slices.Equal(got, want) {
					t.Errorf("live: got %v, want %v", got, want)
				}
			}
		})
	}
}

// TestTopicStartsWithoutItsStarter: the stream that started a topic fails
// its backfill, and is refused, while another stream waits for the topic. The topic then
// reads the stream's end itself, and the other stream gets its backfill and
// the live events.
func TestTopicStartsWithoutItsStarter(t *testing.T) {
	s := newBoltStore(t)
	rc := &readCounter{Source: s, gate: make(chan struct{}), failFirst: fmt.Errorf("injected: %w", store.ErrUnavailable)}
	rec := newRecorder()
	h := NewHandler(Options{Store: rc, Log: testLogger(t), CheckInterval: -1, Observer: rec})
	srv := newTestServer(t, h)
	c := newContext(t)
	old := appendN(t, s, c, 2)

	firstDone := make(chan *sseConn, 1)
	go func() { firstDone <- dialNoCleanup(t, streamURL(srv, c)) }()
	eventually(t, "the first stream reads its backfill", func() bool { return rc.ranges.Load() == 1 })
	secondDone := make(chan *sseConn, 1)
	go func() { secondDone <- dialNoCleanup(t, streamURL(srv, c)) }()
	eventually(t, "the second stream waits for the topic", func() bool {
		h.hub.mu.Lock()
		defer h.hub.mu.Unlock()
		tp := h.hub.topics[c]
		return tp != nil && tp.refs == 2
	})
	close(rc.gate)
	if first := <-firstDone; first != nil {
		first.close()
		t.Fatal("the stream whose backfill failed before it sent anything was answered 200, not refused")
	}
	second := <-secondDone
	if second == nil {
		t.Fatal("the second stream was refused")
	}
	t.Cleanup(second.close)
	if got, want := msgIDs(second.readEvents(t, 2)), ids(old); !slices.Equal(got, want) {
		t.Fatalf("backfill: got %v, want %v", got, want)
	}
	live := appendN(t, s, c, 2)
	if got, want := msgIDs(second.readEvents(t, 2)), ids(live); !slices.Equal(got, want) {
		t.Errorf("live: got %v, want %v", got, want)
	}
	if i := rc.infos.Load(); i != 1 {
		t.Errorf("Info read %d times, want once, by the topic", i)
	}
	if n := rec.get(func(r *recorder) int { return r.closed[CloseError] }); n != 0 {
		t.Errorf("streams closed by an error: %d, want none: the first was refused before it opened", n)
	}
}

// dialNoCleanup opens a stream from a goroutine other than the test's: nil
// when it is refused.
func dialNoCleanup(t *testing.T, url string) *sseConn {
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		if err == nil {
			_ = resp.Body.Close()
		}
		cancel()
		return nil
	}
	c := &sseConn{resp: resp, cancel: cancel, msgs: make(chan message, 64), done: make(chan error, 1), within: waitFor}
	go c.read()
	return c
}

// TestTopicStartExact starts a context's topic many times, each time with
// several streams of every kind opening at once while a writer appends:
// each stream gets a contiguous run of the stream's events, once, in order,
// through the writer's last event.
func TestTopicStartExact(t *testing.T) {
	backendtest.Each(t, backends, func(t *testing.T, b backendtest.Backend) {
		s := b.Open(t)
		const rounds, streams = 8, 6
		for round := range rounds {
			h := newTestHandler(t, s, Options{})
			srv := newTestServer(t, h)
			c := newContext(t)
			appendN(t, s, c, 5)
			stop := startWriter(t, s, c, 500*time.Microsecond)
			queries := []string{"?backfill=0", "?backfill=3", "", "?lastEventId=" + allEvents(t, s, c)[1].ID.String()}
			type result struct {
				query string
				got   []string
				err   error
			}
			results := make(chan result, streams)
			conns := make([]*sseConn, streams)
			var wg sync.WaitGroup
			for i := range streams {
				q := queries[(round+i)%len(queries)]
				conns[i] = dial(t, streamURL(srv, c)+q, nil)
			}
			// Once every stream is live, stop the writer and read each
			// through its last event.
			eventually(t, "every stream attaches", func() bool { return topicSubs(h, c) == streams })
			stop()
			lastID := appendN(t, s, c, 1)[0].ID.String()
			for i, conn := range conns {
				wg.Go(func() {
					var got []string
					for {
						m, ok := conn.tryNext(t)
						if !ok {
							results <- result{queries[(round+i)%len(queries)], got, errors.New("the stream ended")}
							return
						}
						if m.Data == "" {
							continue
						}
						got = append(got, m.ID)
						if m.ID == lastID {
							results <- result{queries[(round+i)%len(queries)], got, nil}
							return
						}
					}
				})
			}
			wg.Wait()
			close(results)
			all := ids(allEvents(t, s, c))
			for r := range results {
				if r.err != nil {
					t.Fatalf("round %d, stream %q: %v after %d events", round, r.query, r.err, len(r.got))
				}
				i := slices.Index(all, r.got[0])
				if i < 0 || !slices.Equal(r.got, all[i:]) {
					t.Fatalf("round %d, stream %q: got %d events from %s, not the stream's run from there (%d events)", round, r.query, len(r.got), r.got[0], len(all)-max(i, 0))
				}
			}
		}
	})
}
