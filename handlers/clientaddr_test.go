package handlers_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/handlers"
)

// TestTrustedProxies: behind a trusted proxy each client the proxy names has
// its own rate budget and is the one logged; from any other peer the
// forwarding headers are ignored.
func TestTrustedProxies(t *testing.T) {
	var logs bytes.Buffer
	api := newTestAPI(t, func(d *handlers.Deps) {
		d.Log = zerolog.New(&logs)
		d.Access = handlers.Access{
			PerAddr:        handlers.Rate{Requests: 2, Window: time.Hour},
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:1::/48")},
		}
	})
	appendFrom := func(remote string, h http.Header) int {
		t.Helper()
		return api.do(t, request{method: http.MethodPost, target: "/api/_events/flow/run-1", body: `{"kind":"a.b"}`, header: h, remote: remote}).Code
	}
	xff := func(v string) http.Header { return http.Header{"X-Forwarded-For": {v}} }
	fwd := func(v string) http.Header { return http.Header{"Forwarded": {v}} }

	// Two clients behind the proxy, two requests each: each has its own
	// budget, whichever header names it, and whatever a client put in front.
	for _, h := range []http.Header{
		xff("203.0.113.5"), xff("198.18.0.1, 203.0.113.5"),
		fwd(`for=203.0.113.6`), fwd(`for="[2001:db8:2::1]:4711";proto=https, for=10.1.1.1`),
	} {
		if code := appendFrom("10.0.0.1:5000", h); code != http.StatusCreated {
			t.Errorf("%v via the proxy: %d, want 201", h, code)
		}
	}
	if code := appendFrom("10.0.0.1:5000", fwd(`for=203.0.113.6`)); code != http.StatusCreated {
		t.Errorf("second request of 203.0.113.6: %d, want 201", code)
	}
	if code := appendFrom("10.0.0.2:5000", xff("203.0.113.5")); code != http.StatusTooManyRequests {
		t.Errorf("third request of 203.0.113.5, through another proxy: %d, want 429", code)
	}
	// The proxy itself sending for itself, or a hop that is no address.
	if code := appendFrom("10.0.0.9:5000", xff("unknown")); code != http.StatusCreated {
		t.Errorf("a hop that is no address: %d, want 201 counted for the proxy", code)
	}

	// An untrusted peer cannot pick its budget with the headers.
	for i, h := range []http.Header{xff("203.0.113.99"), fwd("for=203.0.113.98"), xff("203.0.113.97")} {
		want := http.StatusCreated
		if i == 2 {
			want = http.StatusTooManyRequests
		}
		if code := appendFrom("198.51.100.1:5000", h); code != want {
			t.Errorf("untrusted peer, request %d naming %v: %d, want %d", i+1, h, code, want)
		}
	}

	var clients []string
	for line := range strings.Lines(logs.String()) {
		var entry struct{ Message, Client string }
		if err := json.Unmarshal([]byte(line), &entry); err == nil && entry.Message == "request" {
			clients = append(clients, entry.Client)
		}
	}
	want := []string{"203.0.113.5", "203.0.113.5", "203.0.113.6", "2001:db8:2::1", "203.0.113.6", "203.0.113.5", "10.0.0.9",
		"198.51.100.1", "198.51.100.1", "198.51.100.1"}
	if strings.Join(clients, " ") != strings.Join(want, " ") {
		t.Errorf("logged clients %q, want %q", clients, want)
	}
}
