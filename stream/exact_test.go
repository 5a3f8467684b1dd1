package stream

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/r3labs/sse/v2"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/store"
)

// startWriter appends to c at a steady rate until the returned stop is
// called; stop returns what the writer appended.
func startWriter(t *testing.T, s store.Store, c store.Context, every time.Duration) (stop func() []event.Event) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var written []event.Event
	var werr error
	wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// Not under ctx: an append cut by stop could still be stored
			// (PostgreSQL may commit a statement whose client gave up)
			// without being counted as written.
			res, err := s.Append(context.Background(), c, []event.Event{logEvent(c, i)}, store.AppendOptions{})
			if err != nil {
				werr = err
				return
			}
			written = append(written, res.Events...)
		}
	})
	var once sync.Once
	stop = func() []event.Event {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
		if werr != nil {
			t.Fatalf("writer: %v", werr)
		}
		return written
	}
	t.Cleanup(func() { stop() })
	return stop
}

// disconnectPoints is how many times each client type drops its stream in
// TestExactAcrossDisconnects, per backend.
func disconnectPoints() int {
	if testing.Short() {
		return 50
	}
	return 500
}

// TestExactAcrossDisconnects drops a client's stream at random points while a
// writer appends, resumes it by Last-Event-ID each time, and checks that what
// the client received is the stream, exactly.
func TestExactAcrossDisconnects(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	backendtest.Each(t, backends, func(t *testing.T, b backendtest.Backend) {
		s := b.Open(t)
		srv := newTestServer(t, newTestHandler(t, s, Options{}))
		t.Run("raw reader", func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			c := newContext(t)
			stop := startWriter(t, s, c, time.Millisecond)
			var got []string
			for range disconnectPoints() {
				var hdr http.Header
				if len(got) > 0 {
					hdr = http.Header{"Last-Event-Id": {got[len(got)-1]}}
				}
				conn := dial(t, streamURL(srv, c), hdr)
				got = append(got, msgIDs(conn.readEvents(t, rng.IntN(12)))...)
				conn.close()
			}
			want := ids(stop())
			conn := dial(t, streamURL(srv, c), http.Header{"Last-Event-Id": {got[len(got)-1]}})
			got = append(got, msgIDs(conn.readEvents(t, len(want)-len(got)))...)
			checkExact(t, got, ids(allEvents(t, s, c)))
		})
		t.Run("r3labs client", func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 2))
			c := newContext(t)
			stop := startWriter(t, s, c, time.Millisecond)
			client := sse.NewClient(streamURL(srv, c))
			client.ReconnectStrategy = noRetry{}
			var got []string
			for range disconnectPoints() {
				got = r3labsRead(t, client, got, rng.IntN(12))
			}
			want := ids(stop())
			got = r3labsRead(t, client, got, len(want)-len(got))
			checkExact(t, got, ids(allEvents(t, s, c)))
		})
	})
}

// r3labsRead receives n events with client, appending their ids to got, and
// disconnects.
func r3labsRead(t *testing.T, client *sse.Client, got []string, n int) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if n == 0 {
		cancel()
	}
	var mu sync.Mutex
	var bad string
	done := make(chan error, 1)
	go func() {
		done <- client.SubscribeRawWithContext(ctx, func(m *sse.Event) {
			mu.Lock()
			defer mu.Unlock()
			if ctx.Err() != nil || len(m.Data) == 0 {
				return
			}
			if len(m.Event) > 0 {
				bad = string(m.Event)
			}
			got = append(got, string(m.ID))
			if n--; n == 0 {
				cancel()
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatalf("r3labs client: no end within %v", waitFor)
	}
	mu.Lock()
	defer mu.Unlock()
	if bad != "" {
		t.Fatalf("got an %q message, want events only", bad)
	}
	if n > 0 {
		t.Fatalf("r3labs client: stream ended %d events short", n)
	}
	// The client records an id when it parses a message, which may be one
	// it never handed over; its position is the last one handled.
	if len(got) > 0 {
		client.LastEventID.Store([]byte(got[len(got)-1]))
	}
	return got
}

// noRetry stops the r3labs client from reconnecting on its own: the test
// decides when and from where.
type noRetry struct{}

func (noRetry) NextBackOff() time.Duration { return -1 }
func (noRetry) Reset()                     {}

func checkExact(t *testing.T, got, want []string) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	seen := map[string]int{}
	for i, id := range got {
		if j, dup := seen[id]; dup {
			t.Fatalf("duplicate %s at %d and %d", id, j, i)
		}
		seen[id] = i
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Fatalf("at %d: got %s, want %s (gap or reorder); got %d ids, want %d", i, got[i], want[i], len(got), len(want))
		}
	}
	t.Fatalf("got %d ids, want %d", len(got), len(want))
}
