package handlers_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/stream"
)

// downSource is the real store whose reads fail while down is set.
type downSource struct {
	stream.Source
	down atomic.Bool
}

func (s *downSource) Range(ctx context.Context, c store.Context, q store.RangeQuery) ([]event.Event, error) {
	if s.down.Load() {
		return nil, fmt.Errorf("injected: connection refused: %w", store.ErrUnavailable)
	}
	return s.Source.Range(ctx, c, q)
}

// TestStreamsRefusedDuringAnOutage: while the store cannot be read, a new
// stream is refused with 503 and Retry-After before anything is sent, and
// the clients' many retries cost one line for the outage and one when it
// ends, not a line each; once the store is back a stream opens as before.
func TestStreamsRefusedDuringAnOutage(t *testing.T) {
	var logs syncBuffer
	src := &downSource{}
	api := newTestAPI(t, func(d *handlers.Deps) {
		d.Log = zerolog.New(&logs)
		src.Source = d.Store.(stream.Source)
		sh := stream.NewHandler(stream.Options{Store: src, Log: d.Log, TrustLive: true})
		t.Cleanup(sh.Close)
		d.Stream = sh
	})
	wantStatus(t, api.do(t, post("/api/_events/flow/run-1", `{"kind":"a"}`)), http.StatusCreated)

	src.down.Store(true)
	for range 20 {
		rec := api.do(t, get("/api/_events/flow/run-1/stream"))
		wantStatus(t, rec, http.StatusServiceUnavailable)
		if rec.Header().Get("Retry-After") == "" || rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("a refused stream's headers: %v", rec.Header())
		}
		if e := decode[errorBody](t, rec); e.Error.Code != "unavailable" {
			t.Fatalf("a refused stream's body: %+v", e.Error)
		}
	}

	src.down.Store(false)
	srv := httptest.NewServer(api.h)
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/_events/flow/run-1/stream", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("a stream once the store is back: %d", res.StatusCode)
	}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "data: ") {
	}
	if !strings.Contains(sc.Text(), `"kind":"a"`) {
		t.Fatalf("backfill once the store is back: %q, %v", sc.Text(), sc.Err())
	}
	cancel()
	// The backfill may reach the client before the handler notes that the
	// start worked again.
	wait.For(t, 5*time.Second, 10*time.Millisecond, "the stream start back in the log", func() bool {
		return strings.Contains(logs.String(), "works again")
	})

	var loud []string
	for line := range strings.Lines(logs.String()) {
		var entry struct{ Level, Message string }
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("log line is not JSON: %v\n%s", err, line)
		}
		if entry.Level == "warn" || entry.Level == "error" || strings.Contains(entry.Message, "works again") {
			loud = append(loud, entry.Level+": "+entry.Message)
		}
	}
	if len(loud) != 2 || !strings.HasPrefix(loud[0], "error: stream start") || !strings.HasPrefix(loud[1], "info: stream start") {
		t.Errorf("log lines about the outage:\n%s\nwant one when it starts and one when it ends", strings.Join(loud, "\n"))
	}
}
