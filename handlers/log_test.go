package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/handlers"
)

func TestAccessLog(t *testing.T) {
	var buf bytes.Buffer
	api := newTestAPI(t,
		func(d *handlers.Deps) { d.Log = zerolog.New(&buf) },
		withFaults(faultyStore{append: func(context.Context) error { return errors.New("disk gone") }}))

	rec := api.do(t, request{
		method: http.MethodPost,
		target: "/api/_events/flow/run-1?debug=1",
		body:   `{"kind":"a","data":{"password":"body-secret"}}`,
		header: http.Header{"Authorization": {"Bearer header-secret"}},
	})
	wantStatus(t, rec, http.StatusInternalServerError)
	reqID := rec.Header().Get("X-Request-ID")

	var access, failure map[string]any
	for line := range strings.Lines(buf.String()) {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("log line is not JSON: %v\n%s", err, line)
		}
		if entry["req_id"] != reqID {
			t.Errorf("log line without the request id %s: %s", reqID, line)
		}
		switch entry["message"] {
		case "request":
			access = entry
		case "request failed":
			failure = entry
		}
	}
	if access == nil || access["method"] != "POST" || access["path"] != "/api/_events/flow/run-1" || access["status"] != float64(500) {
		t.Errorf("access line = %v, want method POST, the path without query, status 500", access)
	}
	if failure == nil || !strings.Contains(fmt.Sprint(failure["error"]), "disk gone") {
		t.Errorf("failure line = %v, want the full store error", failure)
	}
	for _, secret := range []string{"header-secret", "body-secret"} {
		if strings.Contains(buf.String(), secret) {
			t.Errorf("the log holds %q:\n%s", secret, buf.String())
		}
	}
}

// TestRequestID: a caller's well-formed X-Request-ID is kept and logged; an
// empty, overlong or unsafe one is replaced by a fresh id.
func TestRequestID(t *testing.T) {
	var buf bytes.Buffer
	api := newTestAPI(t, func(d *handlers.Deps) { d.Log = zerolog.New(&buf) })
	for _, tt := range []struct {
		sent string
		keep bool
	}{
		{"3f2c8a9e-6b1d-4c1a-9d55-0e6f1c2b7a10", true},
		{"trace.1:span-2_x", true},
		{"", false},
		{strings.Repeat("a", 129), false},
		{"id with spaces", false},
		{`x"},"level":"error`, false},
		{"-leading-dash", false},
	} {
		buf.Reset()
		req := get("/healthz")
		req.header = http.Header{"X-Request-Id": {tt.sent}}
		got := api.do(t, req).Header().Get("X-Request-ID")
		if kept := got == tt.sent; kept != tt.keep {
			t.Errorf("sent %q, answered %q: kept %v, want %v", tt.sent, got, kept, tt.keep)
		}
		if !strings.Contains(buf.String(), `"req_id":"`+got+`"`) {
			t.Errorf("sent %q: the log does not carry the id %q:\n%s", tt.sent, got, buf.String())
		}
	}
}

// TestHealthLoggedAtDebug: probes of /healthz and /readyz, GET or HEAD, are
// access-logged at debug, other requests at info, with the duration as a
// Go duration string.
func TestHealthLoggedAtDebug(t *testing.T) {
	var buf bytes.Buffer
	api := newTestAPI(t, func(d *handlers.Deps) { d.Log = zerolog.New(&buf) })
	for _, req := range []request{
		get("/healthz"), get("/readyz"),
		{method: http.MethodHead, target: "/healthz"}, {method: http.MethodHead, target: "/readyz"},
		get("/api/_events/flow/list"),
	} {
		buf.Reset()
		rec := api.do(t, req)
		wantStatus(t, rec, http.StatusOK)
		var line map[string]any
		if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
			t.Fatalf("%s %s: want one JSON access line, got %v:\n%s", req.method, req.target, err, buf.String())
		}
		want := "info"
		if strings.HasPrefix(req.target, "/healthz") || strings.HasPrefix(req.target, "/readyz") {
			want = "debug"
		}
		if line["level"] != want {
			t.Errorf("%s %s: logged at %v, want %s", req.method, req.target, line["level"], want)
		}
		d, ok := line["duration"].(string)
		if _, err := time.ParseDuration(d); !ok || err != nil {
			t.Errorf("%s %s: duration %v is not a duration with a unit", req.method, req.target, line["duration"])
		}
		if req.method == http.MethodHead && rec.Header().Get("Content-Type") == "" {
			t.Errorf("HEAD %s: no content type, want the GET's headers", req.target)
		}
	}
}
