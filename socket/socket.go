// Package socket serves nqd's WebSocket routes (the live views of the v0.5
// UI, docs/websockets.md): the upgrade with its origin check, a read loop
// that hands each JSON message to a Session by its `type`, bounded writes,
// keep-alive pings, and a clean close of every socket on shutdown. What a
// socket says is its Session's business; this package only carries it.
package socket

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd"
)

// Defaults of Options.
const (
	DefaultMaxMessageBytes = 64 << 10
	DefaultWriteTimeout    = 5 * time.Second
	DefaultPing            = 15 * time.Second
)

// Options configure a Server. Zero values take the defaults.
type Options struct {
	// Origins may open sockets from a page on another origin, as
	// NQ_CORS_ORIGINS lets them call the API ("*" is every origin); a page
	// of the socket's own origin, and a client that sends no Origin (not a
	// browser), always may.
	Origins []string
	// MaxMessageBytes bounds one message a client sends; a larger one ends
	// the socket with 1009. DefaultMaxMessageBytes.
	MaxMessageBytes int64
	// WriteTimeout bounds one message written to the client: a client that
	// does not read within it is cut, as a slow SSE client is.
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// Ping is how often the server pings a quiet client, and how long it
	// waits for the pong. DefaultPing.
	Ping time.Duration
	Log  zerolog.Logger
}

// Session is what one socket says: the route's messages. Message and
// Close are called from the socket's read loop, one at a time.
type Session interface {
	// Message handles a message whose `type` is typ; raw is the whole
	// message. It reports false for a type it does not know, which the
	// client is told.
	Message(typ string, raw []byte) bool
	// Close ends what the session started; the socket is closed. It must
	// wait for the session's goroutines to stop writing.
	Close()
}

// ErrDraining refuses a socket while the server shuts down.
var ErrDraining error = &nqd.Error{Code: nqd.CodeUnavailable, Message: "The server is shutting down; reconnect."}

// Server holds the open sockets so that shutdown can close them: net/http
// does not track a connection once it is upgraded.
type Server struct {
	o     Options
	anyOK bool
	trust []string // lower-case scheme://host

	mu       sync.Mutex
	conns    map[*Conn]struct{}
	draining bool
	idle     chan struct{} // closed when draining and the last socket is gone
}

// New builds a Server.
func New(o Options) *Server {
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.Ping <= 0 {
		o.Ping = DefaultPing
	}
	s := &Server{o: o, conns: map[*Conn]struct{}{}, idle: make(chan struct{})}
	for _, origin := range o.Origins {
		if origin == "*" {
			s.anyOK = true
		}
		s.trust = append(s.trust, strings.ToLower(strings.TrimSuffix(origin, "/")))
	}
	return s
}

// OriginAllowed reports whether r's Origin may open a socket: absent (not
// a browser), the socket's own host, or one of Options.Origins. A browser
// sends Origin on every upgrade, so this is what keeps a web page from
// driving a local nqd through its visitor's browser.
func (s *Server) OriginAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || s.anyOK {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	return slices.Contains(s.trust, strings.ToLower(u.Scheme+"://"+u.Host))
}

// Serve upgrades r, which the caller has checked (OriginAllowed, access),
// and runs the socket until either side ends it, or until expiry when that
// is not zero (the credential that opened it expires). newSession makes the
// socket's Session once it is open. Serve returns an error only when it
// refuses before the upgrade, for the caller to answer: ErrDraining.
func (s *Server) Serve(w http.ResponseWriter, r *http.Request, expiry time.Time, newSession func(*Conn) Session) error {
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	if draining {
		return ErrDraining
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true}) // the origin is checked by OriginAllowed
	if err != nil {
		return nil // Accept has answered the client
	}
	ws.SetReadLimit(s.o.MaxMessageBytes)
	// The request's context ends when the handler returns; the socket's
	// is its own.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	c := &Conn{s: s, ws: ws, ctx: ctx, cancel: cancel}
	if !s.add(c) {
		// Drain began during the upgrade: this socket is told as the others.
		c.restart()
		_ = ws.CloseNow()
		cancel()
		return nil
	}
	defer s.remove(c)
	defer cancel()
	go c.keepAlive()
	if !expiry.IsZero() {
		t := time.AfterFunc(time.Until(expiry), func() { c.Fail(websocket.StatusPolicyViolation, "credential expired") })
		defer t.Stop()
	}
	sess := newSession(c)
	c.readLoop(sess)
	cancel()
	sess.Close()
	_ = ws.CloseNow()
	return nil
}

func (s *Server) add(c *Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) remove(c *Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	if s.draining && len(s.conns) == 0 {
		select {
		case <-s.idle:
		default:
			close(s.idle)
		}
	}
}

// restartMessage tells a client the server goes away; the v0.5 UI waits a
// moment and reconnects, to another instance behind a balancer.
type restartMessage struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Drain tells every open socket the server restarts, closes it with 1001
// (going away) and refuses new ones. It returns once every socket has
// ended, or with ctx's error after cutting the rest.
func (s *Server) Drain(ctx context.Context) error {
	s.mu.Lock()
	if !s.draining {
		s.draining = true
		if len(s.conns) == 0 {
			close(s.idle)
		}
	}
	conns := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		go c.restart()
	}
	select {
	case <-s.idle:
		return nil
	case <-ctx.Done():
		for _, c := range conns {
			_ = c.ws.CloseNow()
		}
		return ctx.Err()
	}
}

// restart tells the client the server goes away and closes the socket
// with 1001, waiting briefly for the client's close.
func (c *Conn) restart() {
	_ = c.Send(restartMessage{Type: "server-restart", Message: "The server is restarting; reconnect."})
	c.once.Do(func() {
		_ = c.ws.Close(websocket.StatusGoingAway, "server restart")
		c.cancel()
	})
}

// Conn is one open socket as its Session sees it. Its methods may be
// called from any goroutine.
type Conn struct {
	s      *Server
	ws     *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	// closed is the status of the client's close, -1 when it sent none;
	// set when the read loop ends.
	closed websocket.StatusCode
}

// ClientClosed reports whether the client closed the socket itself, with
// 1000 (normal) or 1001 (going away), rather than dropping it. Valid from
// Session.Close on.
func (c *Conn) ClientClosed() bool {
	return c.closed == websocket.StatusNormalClosure || c.closed == websocket.StatusGoingAway
}

// Context ends when the socket does.
func (c *Conn) Context() context.Context { return c.ctx }

// Send writes v as one JSON text message. A client that does not take it
// within the write timeout is cut.
func (c *Conn) Send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.SendRaw(b)
}

// SendRaw writes b, which must be one JSON value, as a text message.
func (c *Conn) SendRaw(b []byte) error {
	ctx, cancel := context.WithTimeout(c.ctx, c.s.o.WriteTimeout)
	defer cancel()
	err := c.ws.Write(ctx, websocket.MessageText, b)
	if err != nil && c.ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		c.TooSlow()
	}
	return err
}

// TooSlow cuts a client that does not keep up (1008), as a slow SSE client
// is cut; it reconnects and starts over.
func (c *Conn) TooSlow() {
	c.s.o.Log.Info().Msg("socket client too slow; disconnecting")
	c.Fail(websocket.StatusPolicyViolation, "too slow")
}

// ErrorMessage is what a client is told of a message it got wrong; the
// socket stays open.
type ErrorMessage struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Error tells the client msg.
func (c *Conn) Error(msg string) { _ = c.Send(ErrorMessage{Type: "error", Message: msg}) }

// Fail closes the socket with code and reason, waiting briefly for the
// client's close in a goroutine of its own; the read loop then ends.
func (c *Conn) Fail(code websocket.StatusCode, reason string) {
	c.once.Do(func() {
		go func() {
			_ = c.ws.Close(code, reason)
			c.cancel()
		}()
	})
}

// keepAlive pings the client and cuts it when a pong does not come back
// within the ping interval: a peer that vanished without a close holds no
// subscriptions for long.
func (c *Conn) keepAlive() {
	t := time.NewTicker(c.s.o.Ping)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(c.ctx, c.s.o.Ping)
			err := c.ws.Ping(ctx)
			cancel()
			if err != nil {
				if c.ctx.Err() == nil {
					c.Fail(websocket.StatusPolicyViolation, "no pong")
				}
				return
			}
		}
	}
}

// envelope is what every client message starts with.
type envelope struct {
	Type any `json:"type"`
}

// readLoop hands each message to sess until the socket ends. A message that
// is not JSON, or of no known type, is answered with an error and costs
// nothing else.
func (c *Conn) readLoop(sess Session) {
	for {
		_, data, err := c.ws.Read(c.ctx)
		if err != nil {
			c.closed = websocket.CloseStatus(err)
			return
		}
		var env envelope
		if err := json.Unmarshal(data, &env); err != nil {
			c.Error("Invalid JSON")
			continue
		}
		typ, ok := env.Type.(string)
		if !ok || !sess.Message(typ, data) {
			c.Error("Unknown message type: " + typeName(env.Type))
		}
	}
}

// typeName writes a message's type as the Node server's error did: a
// string as it is, a missing one as undefined, anything else as JSON.
func typeName(t any) string {
	switch t := t.(type) {
	case string:
		return t
	case nil:
		return "undefined"
	}
	b, _ := json.Marshal(t)
	return string(b)
}
