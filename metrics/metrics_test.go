package metrics_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/metrics"
	"github.com/nqd-dev/nqd/snapshots"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
	"github.com/nqd-dev/nqd/stream"
)

// scrape returns the exposition text of m.
func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: status %d", rec.Code)
	}
	return rec.Body.String()
}

// wantLines fails for each line missing from the exposition text.
func wantLines(t *testing.T, text string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(text, "\n"+l+"\n") {
			t.Errorf("missing %q", l)
		}
	}
}

func newBolt(t *testing.T) store.Store {
	t.Helper()
	return bolttest.Open(t, boltstore.Options{})
}

func TestStore(t *testing.T) {
	m := metrics.New()
	bolt := bolttest.Open(t, boltstore.Options{Appended: m.EventsAppended})
	st := m.Store(bolt)
	c := store.Context{Type: "flow", ID: "r1"}
	ctx := context.Background()
	evs := []event.Event{{Kind: "log"}, {Kind: "log"}}
	for range 2 {
		if _, err := st.Append(ctx, c, evs, store.AppendOptions{IdempotencyKey: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Append(ctx, store.Context{Type: "BAD", ID: "r1"}, evs, store.AppendOptions{}); err == nil {
		t.Fatal("append to an invalid context: no error")
	}
	got, err := st.Range(ctx, c, store.RangeQuery{})
	if err != nil || len(got) != 2 {
		t.Fatalf("range through the wrapper: %d events, %v", len(got), err)
	}
	wantLines(t, scrape(t, m),
		`nqd_appends_total{result="ok"} 1`,
		`nqd_appends_total{result="replayed"} 1`,
		`nqd_appends_total{result="error"} 1`,
		`nqd_appended_events_total 2`,
		`nqd_append_duration_seconds_count{stage="store"} 3`,
	)
}

func TestMiddleware(t *testing.T) {
	m := metrics.New()
	r := chi.NewRouter()
	r.Post("/api/_events/{type}/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	h := m.Middleware(r)
	for _, req := range []*http.Request{
		httptest.NewRequest(http.MethodPost, "/api/_events/flow/a", nil),
		httptest.NewRequest(http.MethodPost, "/api/_events/flow/b", nil),
		httptest.NewRequest(http.MethodGet, "/healthz", nil),
		httptest.NewRequest(http.MethodGet, "/nowhere", nil),
	} {
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	wantLines(t, scrape(t, m),
		`nqd_http_requests_total{code="201",method="POST",route="/api/_events/{type}/{id}"} 2`,
		`nqd_http_requests_total{code="200",method="GET",route="/healthz"} 1`,
		`nqd_http_requests_total{code="404",method="GET",route="unmatched"} 1`,
		`nqd_append_duration_seconds_count{stage="total"} 2`,
	)
}

func TestStreamObserver(t *testing.T) {
	m := metrics.New()
	st := newBolt(t)
	h := stream.NewHandler(stream.Options{Store: st, Observer: m.Stream(), TrustLive: true})
	r := chi.NewRouter()
	r.Get("/api/_events/{type}/{id}/stream", func(w http.ResponseWriter, r *http.Request) {
		c := store.Context{Type: chi.URLParam(r, "type"), ID: chi.URLParam(r, "id")}
		if err := h.Serve(w, r, stream.Request{Context: c, Backfill: stream.BackfillMax}); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
	srv := httptest.NewServer(m.Middleware(r))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		h.Close()
	})
	c := store.Context{Type: "flow", ID: "r1"}
	if _, err := st.Append(context.Background(), c, []event.Event{{Kind: "log"}}, store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/_events/flow/r1/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// Read until the live event's id line: backfill first, then live.
	res, err := st.Append(context.Background(), c, []event.Event{{Kind: "log"}}, store.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, resp.Body, "id: "+res.Events[0].ID.String()+"\n")
	waitScrape(t, m, `nqd_events_sent_total 1`)
	wantLines(t, scrape(t, m),
		`nqd_sse_connections{type="flow"} 1`,
		`nqd_sse_connections_opened_total{type="flow"} 1`,
		`nqd_resume_total{result="fresh"} 1`,
		`nqd_sse_backfill_events_count 1`,
		`nqd_pubsub_lag_seconds_count 1`,
		`nqd_delivery_lag_seconds_count 1`,
		`nqd_broadcast_duration_seconds_count 1`,
	)
	cancel()
	waitScrape(t, m, `nqd_sse_connections_closed_total{reason="client"} 1`)
	wantLines(t, scrape(t, m), `nqd_sse_connections{type="flow"} 0`)
}

func TestWatchers(t *testing.T) {
	m := metrics.New()
	var live error
	m.WatchLive(func() error { return live })
	m.WatchCache(func() snapshots.Stats {
		return snapshots.Stats{Hits: 9, Misses: 1, Entries: 3, FoldTime: 2 * time.Second}
	})
	wantLines(t, scrape(t, m),
		`nqd_live_feed_up 1`,
		`nqd_cache_hits_total 9`,
		`nqd_cache_misses_total 1`,
		`nqd_cache_entries 3`,
		`nqd_cache_fold_seconds_total 2`,
	)
	live = store.ErrLiveLost
	wantLines(t, scrape(t, m), `nqd_live_feed_up 0`)
}

// readUntil reads r until it has seen s.
func readUntil(t *testing.T, r io.Reader, s string) {
	t.Helper()
	var seen strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(seen.String(), s) {
		n, err := r.Read(buf)
		seen.Write(buf[:n])
		if err != nil {
			t.Fatalf("read %q, wanted %q: %v", seen.String(), s, err)
		}
	}
}

// waitScrape scrapes until line appears, failing after a deadline: the
// observer is told after the client has read.
func waitScrape(t *testing.T, m *metrics.Metrics, line string) {
	t.Helper()
	wait.For(t, 10*time.Second, 5*time.Millisecond, "scrape line "+line, func() bool {
		return strings.Contains(scrape(t, m), "\n"+line+"\n")
	})
}
