package webtest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// TestDashboardQueues pauses the queue the example flows run on from the
// Queues page, starts a run that then waits on it, sees the job wait as
// paused (and no worker take it), resumes the queue by keyboard from the
// queue's own page and sees the run complete.
func TestDashboardQueues(t *testing.T) {
	needChromium(t)
	srv := startServer(t, nil)
	startWorker(t, srv.URL, "")
	b := newBrowser(t)

	b.do(t, chromedp.Navigate(srv.URL+"/queues"))
	b.waitJS(t, `document.querySelector('nav a[data-section="queues"]').getAttribute('aria-current') === 'page'`)
	b.waitJS(t, `document.querySelector('tr[data-queue="default"][data-paused="false"] [data-action="pause"]') !== null`)
	b.do(t, chromedp.Click(chromedp.CSS(`tr[data-queue="default"] [data-action="pause"]`)))
	b.waitJS(t, `document.querySelector('tr[data-queue="default"][data-paused="true"] [data-action="resume"]') !== null`)
	var metrics struct{ Paused bool }
	getJSON(t, srv.URL+"/api/_queues/default/metrics", &metrics)
	if !metrics.Paused {
		t.Fatal("the page shows the queue paused, the API does not")
	}

	var started struct{ FlowID string }
	postJSON(t, srv.URL+"/api/_flows/diamond/start", `{}`, &started)
	b.waitJS(t, `document.querySelector('tr[data-queue="default"] [data-count="paused"]')?.textContent === '1'`)
	var ctx struct {
		EventCount int `json:"eventCount"`
		State      struct{ Status string }
	}
	getJSON(t, srv.URL+"/api/_events/flow/"+started.FlowID, &ctx)
	if ctx.State.Status != "running" || ctx.EventCount != 1 {
		t.Fatalf("the run on a paused queue: status %q with %d events, want running with only flow.started", ctx.State.Status, ctx.EventCount)
	}

	b.shot(t, "queues")

	b.do(t, chromedp.Click(chromedp.CSS(`tr[data-queue="default"] td a`)))
	b.waitJS(t, `location.pathname === '/queues/default'`)
	b.waitJS(t, `document.querySelector('tr[data-job="`+started.FlowID+`:start"][data-state="paused"]') !== null`)
	b.do(t, chromedp.Focus(chromedp.CSS(`[data-action="resume"]`)), chromedp.KeyEvent(kb.Enter))
	b.waitJS(t, `document.querySelector('[data-action="pause"]') !== null`)

	b.do(t, chromedp.Click(chromedp.CSS(`[data-filter="completed"]`)))
	b.waitJS(t, `document.querySelector('[data-count="completed"]')?.textContent === '1'`)
	b.waitJS(t, `document.querySelectorAll('tr[data-state="completed"][data-job^="`+started.FlowID+`:"]').length === 4`)
	b.shot(t, "queue")
	getJSON(t, srv.URL+"/api/_events/flow/"+started.FlowID, &ctx)
	if ctx.State.Status != "completed" {
		t.Fatalf("the run after the resume is %q, want completed", ctx.State.Status)
	}
	b.checkConsole(t)
}

func postJSON(t *testing.T, url, body string, out any) {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %d", url, res.StatusCode)
	}
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
}
