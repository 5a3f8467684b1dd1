package webtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// attackPage is a page on another site that tries to drive the nqd named in
// its query through a browser: forms and no-cors fetches, the requests a
// page may send anywhere without asking.
const attackPage = `<!doctype html><meta charset="utf-8"><title>elsewhere</title>
<iframe name="sink1"></iframe><iframe name="sink2"></iframe>
<form id="start" method="post" enctype="text/plain" target="sink1"><input name='{"x":"' value='"}'></form>
<form id="cancel" method="post" target="sink2"></form>
<script>
const q = new URLSearchParams(location.search), nqd = q.get('nqd'), run = q.get('run');
const loaded = name => new Promise(ok => document.querySelector('iframe[name=' + name + ']').addEventListener('load', ok, {once: true}));
window.attack = async () => {
  const framed = [loaded('sink1'), loaded('sink2')];
  document.getElementById('start').action = nqd + '/api/_flows/diamond/start';
  document.getElementById('cancel').action = nqd + '/api/_flows/diamond/runs/' + run + '/cancel';
  document.getElementById('start').submit();
  document.getElementById('cancel').submit();
  const opts = {method: 'POST', mode: 'no-cors'};
  await Promise.all([
    fetch(nqd + '/api/_flows/diamond/start', {...opts, headers: {'Content-Type': 'text/plain'}, body: '{}'}),
    fetch(nqd + '/api/_flows/diamond/start', {...opts, body: new Blob(['{}'])}),
    fetch(nqd + '/api/_flows/diamond/runs/' + run + '/cancel', opts),
    fetch(nqd + '/api/_workers/claim', {...opts, headers: {'Content-Type': 'text/plain'}, body: '{"queues":["default"],"waitMs":0}'}),
    ...framed,
  ]);
  window.done = true;
};
</script>`

// attacker serves attackPage on its own port; the browser reaches it as
// localhost, another site than nqd's 127.0.0.1.
func attacker(t *testing.T) (origin string) {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(attackPage))
	}))
	t.Cleanup(ts.Close)
	return strings.Replace(ts.URL, "127.0.0.1", "localhost", 1)
}

type runsPage struct {
	Total int `json:"total"`
	Items []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	} `json:"items"`
}

// attack starts a run, lets the page at origin attack nqd, and answers the
// runs of the flow afterwards and the run it started.
func attack(t *testing.T, b *browser, srv *server, origin string) (runsPage, string) {
	t.Helper()
	res, err := http.Post(srv.URL+"/api/_flows/diamond/start", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	var started struct {
		FlowID string `json:"flowId"`
	}
	getBody(t, res, &started)
	page := origin + "/?" + url.Values{"nqd": {srv.URL}, "run": {started.FlowID}}.Encode()
	b.do(t, chromedp.Navigate(page))
	b.evalString(t, `(window.attack(), 'sent')`)
	b.waitJS(t, `window.done === true`)
	var runs runsPage
	getJSON(t, srv.URL+"/api/_flows/diamond/runs", &runs)
	return runs, started.FlowID
}

func TestCrossSitePageChangesNothing(t *testing.T) {
	needChromium(t)
	origin := attacker(t)
	b := newBrowser(t)

	t.Run("another site", func(t *testing.T) {
		srv := startServer(t, nil)
		runs, run := attack(t, b, srv, origin)
		if runs.Total != 1 || runs.Items[0].ID != run || runs.Items[0].Status != "running" {
			t.Errorf("after the attack: %+v, want only run %s, still running", runs, run)
		}
		// The job the page tried to claim is still there for a worker.
		res, err := http.Post(srv.URL+"/api/_workers/claim", "application/json", strings.NewReader(`{"queues":["default"],"waitMs":0}`))
		if err != nil {
			t.Fatal(err)
		}
		var claimed struct {
			Jobs []struct {
				RunID string `json:"runId"`
			} `json:"jobs"`
		}
		getBody(t, res, &claimed)
		if len(claimed.Jobs) != 1 || claimed.Jobs[0].RunID != run {
			t.Errorf("claim after the attack: %+v, want the run's first job", claimed)
		}
	})

	// The same page, trusted in NQ_CORS_ORIGINS: what it sends as JSON or
	// without a body now goes through, so the refusals above are the
	// protection's and not a page that failed to send.
	t.Run("a trusted origin", func(t *testing.T) {
		srv := startServer(t, map[string]string{"NQ_CORS_ORIGINS": origin})
		runs, run := attack(t, b, srv, origin)
		var cancelled bool
		for _, it := range runs.Items {
			// The runs page spells it as the Nuxt Queue UIs read it.
			cancelled = cancelled || (it.ID == run && it.Status == "canceled")
		}
		// Only the fetch with an untyped body started a run; the text/plain
		// and form bodies were still refused.
		if runs.Total != 2 || !cancelled {
			t.Errorf("after the trusted page: %+v, want 2 runs, %s cancelled", runs, run)
		}
	})

	// A page whose DNS name was rebound to nqd's address is same-origin with
	// it, so only the Host check stands in its way.
	t.Run("DNS rebinding", func(t *testing.T) {
		srv := startServer(t, nil)
		port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
		rb := newBrowser(t, chromedp.Flag("host-resolver-rules", "MAP rebound.test 127.0.0.1"))
		rb.do(t, chromedp.Navigate(fmt.Sprintf("http://rebound.test:%s/", port)))
		if body := rb.evalString(t, `document.body.innerText`); !strings.Contains(body, "host_not_allowed") {
			t.Errorf("the rebound page loaded: %.200s", body)
		}
		rb.evalString(t, `(fetch('/api/_flows/diamond/start', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: '{}'})
			.then(r => r.json()).then(j => window.answer = j.error.code), 'sent')`)
		rb.waitJS(t, `window.answer === 'host_not_allowed'`)
		var runs runsPage
		getJSON(t, srv.URL+"/api/_flows/diamond/runs", &runs)
		if runs.Total != 0 {
			t.Errorf("the rebound page started %d runs", runs.Total)
		}
	})
	b.checkConsole(t)
}

// getBody decodes a 2xx answer's JSON body into out.
func getBody(t *testing.T, res *http.Response, out any) {
	t.Helper()
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %d %s", res.Request.Method, res.Request.URL, res.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s %s: %v in %s", res.Request.Method, res.Request.URL, err, raw)
	}
}
