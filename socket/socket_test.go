package socket_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/socket"
)

// echo answers `echo` with the message itself and knows no other type.
type echo struct {
	c      *socket.Conn
	closed chan struct{}
}

func (e *echo) Message(typ string, raw []byte) bool {
	if typ != "echo" {
		return false
	}
	_ = e.c.SendRaw(raw)
	return true
}

func (e *echo) Close() { close(e.closed) }

func serve(t *testing.T, o socket.Options) (*socket.Server, string, chan struct{}) {
	t.Helper()
	o.Log = testkit.Logger(t)
	s := socket.New(o)
	closed := make(chan struct{}, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.OriginAllowed(r) {
			http.Error(w, "origin", http.StatusForbidden)
			return
		}
		done := make(chan struct{})
		if err := s.Serve(w, r, time.Time{}, func(c *socket.Conn) socket.Session { return &echo{c: c, closed: done} }); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		<-done
		closed <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	return s, "ws" + strings.TrimPrefix(srv.URL, "http"), closed
}

func dial(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

func roundTrip(t *testing.T, c *websocket.Conn, msg string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	_, data, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestBadMessagesKeepTheSocket: each bad message gets its error, and the
// socket still answers afterwards.
func TestBadMessagesKeepTheSocket(t *testing.T) {
	_, url, _ := serve(t, socket.Options{})
	c := dial(t, url)
	for msg, want := range map[string]string{
		`{oops`:           "Invalid JSON",
		`[1,2]`:           "Invalid JSON",
		`{}`:              "Unknown message type: undefined",
		`{"type":"nope"}`: "Unknown message type: nope",
		`{"type":7}`:      "Unknown message type: 7",
	} {
		if m := roundTrip(t, c, msg); m["type"] != "error" || m["message"] != want {
			t.Errorf("%s answered %v, want error %q", msg, m, want)
		}
	}
	if m := roundTrip(t, c, `{"type":"echo","n":1}`); m["n"] != float64(1) {
		t.Fatalf("echo after bad messages: %v", m)
	}
}

// TestMessageTooBig: a message over the bound closes the socket with 1009
// and ends its session.
func TestMessageTooBig(t *testing.T) {
	_, url, closed := serve(t, socket.Options{MaxMessageBytes: 1024})
	c := dial(t, url)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"echo","pad":"`+strings.Repeat("x", 2048)+`"}`))
	_, _, err := c.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("read after a large message: %v, want close 1009", err)
	}
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("the session was not closed")
	}
}

// TestDrainClosesWithGoingAway: Drain sends server-restart, closes with
// 1001 and refuses new sockets.
func TestDrainClosesWithGoingAway(t *testing.T) {
	s, url, _ := serve(t, socket.Options{})
	c := dial(t, url)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- s.Drain(ctx) }()
	_, data, err := c.Read(ctx)
	if err != nil || !strings.Contains(string(data), `"type":"server-restart"`) {
		t.Fatalf("first message %s (%v), want server-restart", data, err)
	}
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("then %v, want close 1001", err)
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	if _, res, err := websocket.Dial(ctx, url, nil); err == nil || res == nil || res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a socket after Drain: %v, want 503", err)
	}
}

func TestOriginAllowed(t *testing.T) {
	s := socket.New(socket.Options{Origins: []string{"https://ui.example"}})
	for origin, want := range map[string]bool{
		"":                         true, // not a browser
		"http://nqd.local:8080":    true, // the socket's own host
		"https://ui.example":       true,
		"HTTPS://UI.EXAMPLE":       true,
		"http://ui.example":        false, // another scheme is another origin
		"https://evil.example":     false,
		"null":                     false,
		"https://nqd.local:8080.x": false,
	} {
		r := httptest.NewRequest("GET", "http://nqd.local:8080/api/_flows/ws", nil)
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		if got := s.OriginAllowed(r); got != want {
			t.Errorf("Origin %q: allowed %v, want %v", origin, got, want)
		}
	}
	if !socket.New(socket.Options{Origins: []string{"*"}}).OriginAllowed(httptest.NewRequest("GET", "http://a/", nil)) {
		t.Error("* allows no origin")
	}
}
