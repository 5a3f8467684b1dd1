package handlers_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/handlers"
)

// syncBuffer is a log sink the server's goroutines may write at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestBodyStopsShort: a client that sends less body than its Content-Length
// and stops (closing its side, or going quiet) is told so, as its own
// error, the request stores nothing and the log holds no warning or error.
func TestBodyStopsShort(t *testing.T) {
	var logs syncBuffer
	api := newTestAPI(t, withKV, func(d *handlers.Deps) {
		d.Log = zerolog.New(&logs)
		d.Limits.RequestTimeout = time.Second // a stalled body is cut after half of it
	})
	srv := httptest.NewServer(api.h)
	defer srv.Close()

	body := `{"kind":"a","data":{"n":1}}`
	tests := []struct {
		name, method, target, check string
		quiet                       bool // stay connected instead of closing the sending side
		status                      int
		code                        string
	}{
		{"append, closed", http.MethodPost, "/api/_events/flow/short-1", "/api/_events/flow/short-1", false, 400, "bad_request"},
		{"append, quiet", http.MethodPost, "/api/_events/flow/short-2", "/api/_events/flow/short-2", true, 408, "request_timeout"},
		{"kv put, closed", http.MethodPut, "/api/_kv/short-3", "/api/_kv/short-3", false, 400, "bad_request"},
		{"kv put, quiet", http.MethodPut, "/api/_kv/short-4", "/api/_kv/short-4", true, 408, "request_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
				t.Fatal(err)
			}
			sent := body
			if strings.HasPrefix(tt.target, "/api/_kv") {
				sent = `{"fields":{"state":"pending"}}`
			}
			fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: example.com\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
				tt.method, tt.target, len(sent)+100, sent)
			if !tt.quiet {
				if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
					t.Fatal(err)
				}
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("read the answer: %v", err)
			}
			defer resp.Body.Close()
			var e errorBody
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatalf("decode the answer: %v", err)
			}
			if resp.StatusCode != tt.status || e.Error.Code != tt.code || e.Error.Message == "" {
				t.Errorf("answer %d %+v, want %d %s with a message", resp.StatusCode, e.Error, tt.status, tt.code)
			}
			rec := api.do(t, get(tt.check))
			if strings.HasPrefix(tt.target, "/api/_kv") {
				wantStatus(t, rec, http.StatusNotFound)
			} else if strings.Contains(rec.Body.String(), `"kind"`) {
				t.Errorf("the stream holds an event after a body that stopped short: %s", rec.Body)
			}
		})
	}
	for line := range strings.Lines(logs.String()) {
		var entry struct{ Level string }
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("log line is not JSON: %v\n%s", err, line)
		}
		if entry.Level == "warn" || entry.Level == "error" {
			t.Errorf("a client's short body is logged at %s: %s", entry.Level, line)
		}
	}
}
