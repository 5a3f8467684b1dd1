package webtest

import (
	"testing"

	"github.com/chromedp/chromedp"
)

// TestDashboardTriggerRegistry registers a manual and an event trigger,
// fires the first by hand and the second by appending the event it waits
// for, sees both fires on the Triggers page, and follows a trigger to its
// own page, where its events show the run the fire started.
func TestDashboardTriggerRegistry(t *testing.T) {
	needChromium(t)
	srv := startServer(t, nil)
	b := newBrowser(t)

	post(t, srv.URL+"/api/_triggers", `{"name": "orders", "type": "manual", "description": "orders by hand", "subscriptions": ["diamond"]}`)
	post(t, srv.URL+"/api/_triggers", `{"name": "on-order", "type": "event", "config": {"event": "order.created", "filter": {"region": "eu"}}, "subscriptions": ["diamond"]}`)
	var fired struct{ Runs map[string]string }
	postJSON(t, srv.URL+"/api/_triggers/orders/fire", `{"orderId": 7}`, &fired)
	if fired.Runs["diamond"] == "" {
		t.Fatalf("the fire started no run of diamond: %+v", fired)
	}
	post(t, srv.URL+"/api/_events/order/o-1", `{"events": [{"kind": "order.created", "data": {"region": "eu"}}]}`)

	b.do(t, chromedp.Navigate(srv.URL+"/triggers"))
	b.waitJS(t, `document.querySelector('tr[data-registry="orders"] [data-count="fires"]')?.textContent === '1'`)
	// The event trigger is fired by the server's watcher, within its poll.
	b.waitJS(t, `document.querySelector('tr[data-registry="on-order"] [data-count="started"]')?.textContent === '1'`)
	b.shot(t, "trigger-registry")

	b.do(t, chromedp.Click(chromedp.CSS(`tr[data-registry="orders"] td a`)))
	b.waitJS(t, `location.pathname === '/triggers/orders'`)
	b.waitJS(t, `document.querySelector('tr[data-event="trigger.flow.started"] a[href$="`+fired.Runs["diamond"]+`"]') !== null`)
	b.waitJS(t, `document.querySelector('tr[data-event="trigger.registered"]') !== null`)
	b.waitJS(t, `document.querySelector('[data-count="fires"]')?.textContent.startsWith('1 ')`)
	b.shot(t, "trigger")
	b.checkConsole(t)
}
