package stream

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browserPage opens an EventSource the way the v0.3 UI does (onmessage
// only) and records what arrives.
const browserPage = `<!doctype html><meta charset="utf-8"><title>nqd stream</title>
<script>
window.ids = []; window.opens = 0; window.bad = [];
const es = new EventSource(%q);
es.onopen = () => { window.opens++; };
es.onmessage = (e) => {
  const m = JSON.parse(e.data);
  if (m.v !== 1 || m.record.id !== e.lastEventId) window.bad.push(e.data);
  window.ids.push(m.record.id);
};
</script>`

// TestBrowserResumes runs a real Chromium: the page gets backfill and live
// events, and after the server drops its stream the browser reconnects by
// itself with Last-Event-ID and misses or repeats nothing.
func TestBrowserResumes(t *testing.T) {
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("NQD_REQUIRE_BROWSER") == "1" {
			t.Fatalf("chromium not found: %v", err)
		}
		t.Skip("chromium not found; set NQD_REQUIRE_BROWSER=1 to require it")
	}
	s := newBoltStore(t)
	h := newTestHandler(t, s, Options{Retry: 100 * time.Millisecond})
	c := newContext(t)
	page := fmt.Sprintf(browserPage, "/api/_events/"+c.Type+"/"+c.ID+"/stream")
	srv := newTestServer(t, h, func(mux *http.ServeMux) {
		mux.HandleFunc("GET /page", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write([]byte(page))
		})
	})

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()

	appendN(t, s, c, 3)
	if _, err := chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/page")); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	waitIDs := func(n int) []string {
		t.Helper()
		var got []string
		eventually(t, fmt.Sprintf("the page to hold %d events", n), func() bool {
			var err error
			if got, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.ids`)); err != nil {
				t.Fatalf("evaluate: %v", err)
			}
			return len(got) >= n
		})
		return got
	}
	waitIDs(3)
	appendN(t, s, c, 2)
	waitIDs(5)

	// The server drops the stream; events appended meanwhile must arrive
	// once the browser is back.
	h.mu.Lock()
	for cn := range h.conns {
		cn.close()
	}
	h.mu.Unlock()
	appendN(t, s, c, 2)
	waitIDs(7)
	appendN(t, s, c, 1)
	got := waitIDs(8)

	if want := ids(allEvents(t, s, c)); !slices.Equal(got, want) {
		t.Errorf("browser got %v, want %v", got, want)
	}
	opens, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.opens`))
	if err != nil {
		t.Fatal(err)
	}
	bad, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.bad`))
	if err != nil {
		t.Fatal(err)
	}
	if opens != 2 {
		t.Errorf("connections opened: got %d, want 2 (one reconnect)", opens)
	}
	if len(bad) > 0 {
		t.Errorf("malformed messages: %v", bad)
	}
}
