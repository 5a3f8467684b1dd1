package handlers_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/nqd-dev/nqd/handlers"
)

// nuxtStandIn is a real HTTP server in the Nuxt app's place: it names the
// path and Host it was asked, and echoes on a WebSocket at /_nuxt/hmr.
func nuxtStandIn(t *testing.T) *url.URL {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/_nuxt/hmr" {
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer c.CloseNow()
			for {
				typ, data, err := c.Read(r.Context())
				if err != nil {
					return
				}
				if c.Write(r.Context(), typ, append([]byte("nuxt:"), data...)) != nil {
					return
				}
			}
		}
		_, _ = io.WriteString(w, "nuxt "+r.Method+" "+r.URL.RequestURI()+" host="+r.Host)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return u
}

// TestPassThrough: with a UI upstream, nqd serves its API (and its
// sockets) and forwards everything else, Nuxt Icon's /api/_nuxt_icon and
// WebSocket upgrades included, to the app, under the Host allow-list.
func TestPassThrough(t *testing.T) {
	up := nuxtStandIn(t)
	n := startSocketNode(t, openSocketStores(t, "bolt", 1)[0], func(d *handlers.Deps) {
		d.UIUpstream = up
		d.CheckHost = true
	})
	get := func(path, host string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", n.url+path, nil)
		if host != "" {
			req.Host = host
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	self := strings.TrimPrefix(n.url, "http://")
	for path, want := range map[string]string{
		"/_nvent?p=/flows":       "nuxt GET /_nvent?p=/flows host=" + self,
		"/":                      "nuxt GET / host=" + self,
		"/api/_nuxt_icon/i.json": "nuxt GET /api/_nuxt_icon/i.json host=" + self,
		"/_nuxt/entry.js":        "nuxt GET /_nuxt/entry.js host=" + self,
	} {
		if code, body := get(path, ""); code != http.StatusOK || body != want {
			t.Errorf("GET %s: %d %q, want the app's %q", path, code, body, want)
		}
	}
	if code, body := get("/api/_flows", ""); code != http.StatusOK || !strings.Contains(body, `"sf"`) {
		t.Errorf("GET /api/_flows: %d %s, want nqd's flows", code, body)
	}
	if code, _ := get("/healthz", ""); code != http.StatusOK {
		t.Errorf("GET /healthz: %d", code)
	}
	if code, body := get("/_nvent", "rebound.example"); code != http.StatusForbidden || !strings.Contains(body, "host_not_allowed") {
		t.Errorf("a foreign Host reached the app: %d %s", code, body)
	}

	// The app's own socket, through nqd.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(n.url, "http")+"/_nuxt/hmr", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, data, err := c.Read(ctx); err != nil || string(data) != "nuxt:hi" {
		t.Fatalf("the app's socket answered %q, %v", data, err)
	}
	// nqd's own socket on the same origin.
	ws := dialSocket(t, n.url, "/api/_flows/ws", nil)
	ws.expect("connected")
}

// TestPassThroughUpstreamDown: a request for the app while it is down is
// a 503 in nqd's error shape, and nqd's API still answers.
func TestPassThroughUpstreamDown(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	up, _ := url.Parse(srv.URL)
	srv.Close()
	n := startSocketNode(t, openSocketStores(t, "bolt", 1)[0], func(d *handlers.Deps) { d.UIUpstream = up })
	res, err := http.Get(n.url + "/_nvent")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "NQ_UI_UPSTREAM") {
		t.Errorf("app down: %d %s", res.StatusCode, b)
	}
	if res, err := http.Get(n.url + "/api/_flows"); err != nil || res.StatusCode != http.StatusOK {
		t.Errorf("the API with the app down: %v %v", res, err)
	}
}
