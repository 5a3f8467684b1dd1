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
