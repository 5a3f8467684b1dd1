package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/socket"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/stream"
)

// Follower follows a context's stream for a socket subscription: its whole
// history, then live, with no gap and no duplicate; see stream.Handler.
type Follower interface {
	Follow(ctx context.Context, c store.Context) (*stream.Feed, error)
}

// MaxSocketSubscriptions bounds the subscriptions one socket holds at once;
// each holds a live feed.
const MaxSocketSubscriptions = 32

// DefaultStatsInterval is how often an instance reads its flows' stats
// while a socket listens to them.
const DefaultStatsInterval = time.Second

// DrainSockets tells every open socket the server restarts and closes it
// (1001), and refuses new ones; see socket.Server.Drain. Worker channels
// are drained alongside the UI's sockets.
func (a *API) DrainSockets(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- a.workerSockets.Drain(ctx) }()
	return errors.Join(a.sockets.Drain(ctx), <-errc)
}

// serveSocket admits an upgrade by the rules of an SSE stream: an Origin
// of the page's own host or NQ_CORS_ORIGINS (a browser sends it on every
// upgrade, and nothing else keeps a web page from driving a local nqd), a
// read token in the header or a stream token in the query when access
// control is on, and one of the client's stream slots for the socket's life.
// A stream token ends the socket when it expires and must cover each
// context subscribed to.
func (a *API) serveSocket(newSession func(*socketClient) socket.Session) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !a.sockets.OriginAllowed(r) {
			writeError(w, r, &nqd.Error{Code: nqd.CodeCrossOrigin,
				Message: "A page of another origin may not open this socket; add its origin to NQ_CORS_ORIGINS to allow it."})
			return
		}
		p, until, err := a.access.Auth.Stream(r, "", "")
		if err != nil {
			writeError(w, r, err)
			return
		}
		if a.feeds == nil {
			notFound(w, r)
			return
		}
		release, ok := a.access.streams.Acquire(clientKeys(r, p)...)
		if !ok {
			w.Header().Set("Retry-After", streamRetryAfter)
			writeError(w, r, &nqd.Error{Code: nqd.CodeRateLimited,
				Message: "Too many streams are open for this client; close one or retry later."})
			return
		}
		defer release()
		err = a.sockets.Serve(w, r, until, func(c *socket.Conn) socket.Session {
			return newSession(&socketClient{api: a, conn: c, req: r})
		})
		if err != nil {
			writeError(w, r, err)
		}
	}
}

// socketClient is what every socket session shares: its connection, the
// upgrade request its credentials came with, and the API.
type socketClient struct {
	api  *API
	conn *socket.Conn
	req  *http.Request
}

// covers reports whether the socket's credentials may read context c: a
// stream token must name it, an API token with read scope reads all.
func (sc *socketClient) covers(c store.Context) bool {
	_, _, err := sc.api.access.Auth.Stream(sc.req, c.Type, c.ID)
	return err == nil
}

// stamp is a message's `timestamp`: epoch milliseconds.
func (sc *socketClient) stamp() int64 { return sc.api.now().UnixMilli() }

// send writes a control message with its timestamp.
func (sc *socketClient) send(typ string) {
	_ = sc.conn.Send(map[string]any{"type": typ, "timestamp": sc.stamp()})
}

// decode reads a client message into v, telling the client when it cannot.
func (sc *socketClient) decode(raw []byte, v any) bool {
	if err := json.Unmarshal(raw, v); err != nil {
		sc.conn.Error("Invalid message: " + err.Error())
		return false
	}
	return true
}

// subscription is one context a socket follows, run by follow.
type subscription struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// stop ends the subscription and waits until it has written its last
// message, so that what the socket says next comes after it.
func (s *subscription) stop() {
	s.cancel()
	<-s.done
}

// render writes one event as a socket message; history renders many.
type render struct {
	event   func(b []byte, ev event.Event) ([]byte, error)
	history func(b []byte, evs []event.Event) ([]byte, error)
}

// follow sends c's history then its live events over the socket until ctx
// ends, then closes done. The history goes out in pages (one message per
// store read), so that no message grows with the run; the client appends
// them all. A reader that falls behind the live feed by more than an SSE
// client may is cut, and reconnects.
func (sc *socketClient) follow(ctx context.Context, c store.Context, out render, subscribed func()) *subscription {
	ctx, cancel := context.WithCancel(ctx)
	s := &subscription{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer cancel()
		feed, err := sc.api.feeds.Follow(ctx, c)
		if err != nil {
			if ctx.Err() == nil {
				sc.conn.Error("Server initializing, please retry")
			}
			return
		}
		defer feed.Close()
		pages := 0
		err = feed.History(ctx, func(evs []event.Event) error {
			pages++
			b, err := out.history(nil, evs)
			if err != nil {
				return err
			}
			return sc.conn.SendRaw(b)
		})
		if err == nil && pages == 0 {
			var b []byte
			if b, err = out.history(nil, nil); err == nil {
				err = sc.conn.SendRaw(b)
			}
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			sc.api.log.Warn().Err(err).Str("context", c.String()).Msg("socket history failed")
			sc.conn.Error("Failed to load history")
			return
		}
		subscribed()
		var b []byte
		for {
			select {
			case <-ctx.Done():
				return
			case <-feed.Wake():
			}
			evs, err := feed.Next(ctx)
			if err != nil {
				if ctx.Err() == nil {
					sc.api.log.Info().Err(err).Str("context", c.String()).Msg("socket subscription ended; disconnecting")
					sc.conn.TooSlow()
				}
				return
			}
			for _, ev := range evs {
				if b, err = out.event(b[:0], ev); err != nil {
					sc.api.log.Error().Err(err).Str("context", c.String()).Str("id", ev.ID.String()).Msg("cannot encode event")
					continue
				}
				if sc.conn.SendRaw(b) != nil {
					return
				}
			}
		}
	}()
	return s
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}

// appendEnvelope appends the v0.5 run event envelope {v:1, eventType, record},
// eventType spelled as the record's type.
func appendEnvelope(b []byte, ev event.Event) ([]byte, error) {
	b = append(b, `{"v":1,"eventType":`...)
	b = appendString(b, event.KindV05(ev.Kind))
	b = append(b, `,"record":`...)
	b, err := ev.AppendV05(b)
	return append(b, '}'), err
}

// feeds is what a flows or a triggers socket follows: streams by key and
// the stats, each stopped when the socket closes.
type feeds struct {
	*socketClient
	subs  map[string]*subscription
	stats *subscription
}

func newFeeds(sc *socketClient) feeds {
	sc.send("connected")
	return feeds{socketClient: sc, subs: map[string]*subscription{}}
}

// shared answers the messages the flows and triggers sockets take alike,
// the stats on and off and ping; follow starts the socket's stats. It
// reports whether typ was one of them.
func (f *feeds) shared(typ string, follow func() *subscription) bool {
	switch typ {
	case "subscribe.stats":
		if f.stats != nil {
			f.conn.Error("Already subscribed to stats")
			return true
		}
		f.stats = follow()
	case "unsubscribe.stats":
		if f.stats != nil {
			f.stats.stop()
			f.stats = nil
		}
		f.send("stats.unsubscribed")
	case "ping":
		f.send("pong")
	default:
		return false
	}
	return true
}

// unfollow stops the stream followed under key and reports whether there
// was one.
func (f *feeds) unfollow(key string) bool {
	sub := f.subs[key]
	if sub == nil {
		return false
	}
	sub.stop()
	delete(f.subs, key)
	return true
}

func (f *feeds) Close() {
	for _, sub := range f.subs {
		sub.stop()
	}
	if f.stats != nil {
		f.stats.stop()
	}
}
