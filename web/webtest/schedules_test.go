package webtest

import (
	"testing"

	"github.com/chromedp/chromedp"
)

// TestDashboardSchedules schedules a flow through the v0.4 route, sees the
// Schedules page list it with its next three fire times, fires it from the
// page and sees its fires counted.
func TestDashboardSchedules(t *testing.T) {
	needChromium(t)
	srv := startServer(t, nil)
	b := newBrowser(t)
	var created struct{ ID string }
	postJSON(t, srv.URL+"/api/_flows/diamond/schedule", `{"cron":"0 3 * * *","timezone":"Europe/Berlin","jobId":"nightly"}`, &created)

	b.do(t, chromedp.Navigate(srv.URL+"/schedules"))
	b.waitJS(t, `document.querySelector('nav a[data-section="schedules"]').getAttribute('aria-current') === 'page'`)
	b.waitJS(t, `document.querySelectorAll('tr[data-schedule="schedule:nightly"] [data-next] li time').length === 3`)
	if got := b.evalString(t, `document.querySelector('tr[data-schedule="schedule:nightly"] code').textContent`); got != "nightly" {
		t.Fatalf("the row names %q", got)
	}
	b.do(t, chromedp.Click(chromedp.CSS(`tr[data-schedule="schedule:nightly"] [data-action="fire"]`)))
	b.waitJS(t, `document.querySelector('tr[data-schedule="schedule:nightly"] [data-count="fires"]')?.textContent === '1'`)
	b.shot(t, "schedules")
	var runs struct{ Total int }
	getJSON(t, srv.URL+"/api/_flows/diamond/runs", &runs)
	if runs.Total != 1 {
		t.Fatalf("%d runs after firing once", runs.Total)
	}
	b.checkConsole(t)
}
