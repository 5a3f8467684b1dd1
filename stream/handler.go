package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/hlog"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// StateFunc returns a context's reduced state as JSON and the id of the last
// event folded into it. It fills `event: reset` messages.
type StateFunc func(ctx context.Context, c store.Context) (json.RawMessage, event.ID, error)

// Hooks let tests act at points of a connection's life.
type Hooks struct {
	// AfterSubscribe runs once the connection's live feed is attached and
	// before its backfill is read.
	AfterSubscribe func()
}

// Options configure a Handler. Zero values take the defaults noted.
type Options struct {
	Store  Source
	Prefix string // key prefix of raw-tail stream names; store.DefaultPrefix
	Log    zerolog.Logger

	Heartbeat    time.Duration // longest silence before a comment line; DefaultHeartbeat
	Retry        time.Duration // the `retry:` the browser waits before reconnecting; 2s
	WriteTimeout time.Duration // bound on one write to a client; 5s
	QueueEvents  int           // events a connection may have queued; 1000
	QueueBytes   int           // bytes a connection may have queued; 1 MiB
	MaxBackfill  int           // most events a backfill sends; DefaultMaxBackfill

	// MaxLifetime ends a connection after this long plus up to
	// LifetimeJitter (MaxLifetime/10 when zero), so that connections spread
	// over instances again; 0 keeps connections open.
	MaxLifetime    time.Duration
	LifetimeJitter time.Duration

	// DrainWindow spreads the closes of Drain; 5s, shortened to fit Drain's
	// context.
	DrainWindow time.Duration

	// CheckInterval is how often an active context's stream end is compared
	// with what arrived live; 500ms, negative disables.
	CheckInterval time.Duration

	// SubscribeBuffer is the store subscription buffer of one context; 256.
	// The hub drains it without waiting, and an overflow costs a resubscribe
	// and a read from the stream, not an event.
	SubscribeBuffer int

	// TrustLive says the store's live feed never skips an event without
	// ending the subscription (true of the embedded store, not of Redis
	// Pub/Sub). Otherwise a live event that does not provably follow the
	// previous one is checked against the stream, one read per batch.
	TrustLive bool

	// State fills `event: reset`; nil sends the position only.
	State StateFunc

	// Observer is told about connections and deliveries, for metrics;
	// nil observes nothing.
	Observer Observer

	Hooks Hooks
}

// Defaults of Options that the server's configuration shares.
const (
	DefaultHeartbeat   = 15 * time.Second
	DefaultMaxBackfill = 10000
)

func (o *Options) defaults() {
	if o.Prefix == "" {
		o.Prefix = store.DefaultPrefix
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.Retry <= 0 {
		o.Retry = 2 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 5 * time.Second
	}
	if o.QueueEvents <= 0 {
		o.QueueEvents = 1000
	}
	if o.QueueBytes <= 0 {
		o.QueueBytes = 1 << 20
	}
	if o.MaxBackfill <= 0 {
		o.MaxBackfill = DefaultMaxBackfill
	}
	if o.MaxLifetime > 0 && o.LifetimeJitter <= 0 {
		o.LifetimeJitter = o.MaxLifetime / 10
	}
	if o.DrainWindow <= 0 {
		o.DrainWindow = 5 * time.Second
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
}

// Handler serves the SSE endpoints (described in openapi.yaml) from one Hub.
type Handler struct {
	o   Options
	hub *Hub

	mu       sync.Mutex
	conns    map[*conn]struct{}
	draining bool
	idle     chan struct{} // closed when draining and the last connection is gone
}

// conn is one open stream, as Drain sees it.
type conn struct {
	stop chan struct{}
	once sync.Once
}

func (c *conn) close() { c.once.Do(func() { close(c.stop) }) }

// NewHandler builds the handlers and their hub.
func NewHandler(o Options) *Handler {
	o.defaults()
	return &Handler{
		o: o,
		hub: newHub(o.Store, o.Log, hubOptions{
			Prefix:    o.Prefix,
			Buffer:    o.SubscribeBuffer,
			Check:     o.CheckInterval,
			TrustLive: o.TrustLive,
			Observer:  o.Observer,
		}),
		conns: map[*conn]struct{}{},
		idle:  make(chan struct{}),
	}
}

// Hub is the handler's hub.
func (h *Handler) Hub() *Hub { return h.hub }

// Ready reports whether the live path works; /readyz fails while it does not.
func (h *Handler) Ready() error { return h.hub.Ready() }

// Close ends the hub's subscriptions. Call it after Drain.
func (h *Handler) Close() { h.hub.Close() }

// Drain closes every open stream, each at a random moment of the drain
// window so that clients reconnect elsewhere in a spread rather than a storm,
// and refuses new ones. It returns when all are closed, or with ctx's error
// after closing the rest at once.
func (h *Handler) Drain(ctx context.Context) error {
	h.mu.Lock()
	if !h.draining {
		h.draining = true
		if len(h.conns) == 0 {
			close(h.idle)
		}
	}
	conns := make([]*conn, 0, len(h.conns))
	for c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()

	window := h.o.DrainWindow
	if dl, ok := ctx.Deadline(); ok {
		window = min(window, time.Until(dl)*3/4)
	}
	for _, c := range conns {
		if window <= 0 {
			c.close()
			continue
		}
		time.AfterFunc(rand.N(window), c.close)
	}
	select {
	case <-h.idle:
		return nil
	case <-ctx.Done():
		for _, c := range conns {
			c.close()
		}
		return ctx.Err()
	}
}

func (h *Handler) register() (*conn, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.draining {
		return nil, false
	}
	c := &conn{stop: make(chan struct{})}
	h.conns[c] = struct{}{}
	return c, true
}

func (h *Handler) unregister(c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.conns, c)
	if h.draining && len(h.conns) == 0 {
		select {
		case <-h.idle:
		default:
			close(h.idle)
		}
	}
}

// plan is what a connection sends before going live.
type plan struct {
	resume  bool     // the client named the last event it has
	from    event.ID // that event (zero when it was not an id); live only: the start
	limit   int      // without resume: the newest events to send
	notice  bool     // limit is the configured maximum: say when it cuts
	tail    bool     // the raw-tail form
	noTopic bool     // no stream at all: heartbeats only
}

// ServeStream serves GET /api/_events/{type}/{id}/stream: the context's
// stream as backfill then live, or the events after the client's last one.
func (h *Handler) ServeStream(w http.ResponseWriter, r *http.Request) {
	c := store.Context{Type: chi.URLParam(r, "type"), ID: chi.URLParam(r, "id")}
	if !c.Valid() {
		fields := map[string]string{}
		if !event.ValidType(c.Type) {
			fields["type"] = "must match ^[a-z][a-z0-9_-]{0,31}$"
		}
		if !event.ValidContextID(c.ID) {
			fields["id"] = "must match ^[A-Za-z0-9][A-Za-z0-9._~-]{0,127}$ and not be list"
		}
		writeError(w, http.StatusBadRequest, "validation_failed", "The request has invalid fields.", fields)
		return
	}
	p := resumePlan(r)
	if !p.resume {
		p.limit, p.notice = h.o.MaxBackfill, true
		if s := r.URL.Query().Get("backfill"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				writeError(w, http.StatusBadRequest, "validation_failed", "The request has invalid fields.",
					map[string]string{"backfill": "must be a whole number of events, 0 or more"})
				return
			}
			p.limit, p.notice = min(n, h.o.MaxBackfill), n > h.o.MaxBackfill
		}
	}
	h.serve(w, r, c, p)
}

// ServeRawTail serves GET /api/_events/sse?stream=<prefix>:<type>:<id>, the
// live tail of one stream that the v0.3 UI ("era A", docs/compatibility.md)
// reads: live events only, unless the client resumes after an event it has.
func (h *Handler) ServeRawTail(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	key := q.Get("stream")
	p := resumePlan(r)
	p.tail = true
	if q.Has("stream") && key == "" {
		writeError(w, http.StatusBadRequest, "validation_failed", "The request has invalid fields.",
			map[string]string{"stream": "must not be empty: " + h.o.Prefix + ":<type>:<id>"})
		return
	}
	// The era A dashboard tails `<prefix>:events` by default (or sends no
	// stream), which nothing writes: it gets an open, quiet stream, as it
	// did there.
	if key == "" || key == h.o.Prefix+":events" {
		p.noTopic = true
		h.serve(w, r, store.Context{}, p)
		return
	}
	prefix, rest, _ := strings.Cut(key, ":")
	typ, id, _ := strings.Cut(rest, ":")
	c := store.Context{Type: typ, ID: id}
	if prefix != h.o.Prefix || !c.Valid() {
		writeError(w, http.StatusBadRequest, "validation_failed", "The request has invalid fields.",
			map[string]string{"stream": "must be " + h.o.Prefix + ":<type>:<id> with a valid type and id"})
		return
	}
	h.serve(w, r, c, p)
}

// resumePlan reads the client's last event: the Last-Event-ID header, which
// a browser sends on its own reconnects and so is the freshest, then the
// lastEventId and fromId query parameters of a first connect.
func resumePlan(r *http.Request) plan {
	s := r.Header.Get("Last-Event-ID")
	if s == "" {
		s = r.URL.Query().Get("lastEventId")
	}
	if s == "" {
		s = r.URL.Query().Get("fromId")
	}
	if s == "" {
		return plan{}
	}
	id, err := event.ParseID(s)
	if err != nil {
		return plan{resume: true} // not an id: it can only get a reset
	}
	if id.IsZero() {
		return plan{} // "0": from the beginning, as in Redis
	}
	return plan{resume: true, from: id}
}

func (h *Handler) logger(r *http.Request) *zerolog.Logger {
	if l := hlog.FromRequest(r); l.GetLevel() != zerolog.Disabled {
		return l
	}
	return &h.o.Log
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, c store.Context, p plan) {
	log := h.logger(r)
	if _, ok := w.(http.Flusher); !ok {
		writeError(w, http.StatusInternalServerError, "internal", "Streaming is not supported here.", nil)
		return
	}
	cn, ok := h.register()
	if !ok {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "The server is shutting down; reconnect.", nil)
		return
	}
	defer h.unregister(cn)

	ctx := r.Context()
	q := newQueue(p.tail, h.o.QueueEvents, h.o.QueueBytes)
	if !p.noTopic {
		t, err := h.hub.join(ctx, c, q)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn().Err(err).Str("context", c.String()).Msg("cannot subscribe")
				writeError(w, http.StatusServiceUnavailable, "unavailable", "The store is unavailable; retry later.", nil)
			}
			return
		}
		defer h.hub.leave(t, q)
	}
	if h.o.Hooks.AfterSubscribe != nil {
		h.o.Hooks.AfterSubscribe()
	}
	if !p.noTopic && !p.resume && p.limit == 0 {
		// Live only: the client gets exactly what is appended after the
		// stream's end as it is before the response starts.
		info, err := h.o.Store.Info(ctx, c)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn().Err(err).Str("context", c.String()).Msg("cannot read the stream's end")
				writeError(w, http.StatusServiceUnavailable, "unavailable", "The store is unavailable; retry later.", nil)
			}
			return
		}
		p.from = info.LastID
	}

	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache, no-transform")
	hdr.Set("X-Accel-Buffering", "no")
	hdr.Set("Connection", "keep-alive")
	hdr.Del("Content-Length")
	w.WriteHeader(http.StatusOK)
	s := &sink{w: w, rc: http.NewResponseController(w), timeout: h.o.WriteTimeout, tail: p.tail}
	// A deadline in the past fails the write in progress at once: an
	// overflowing client is cut at the queue bound, not WriteTimeout later.
	q.onFail(func() { _ = s.rc.SetWriteDeadline(time.Now()) })
	if p.tail {
		s.key, _ = json.Marshal(h.o.Prefix + ":" + c.String())
	}
	defer s.release()
	h.o.Observer.Opened(c)
	reason := CloseError
	defer func() { h.o.Observer.Closed(c, reason) }()
	s.buf = fmt.Appendf(s.buf, ": nqd\nretry: %d\n\n", h.o.Retry.Milliseconds())
	if err := s.flushBuf(); err != nil {
		reason = closeReason(ctx, err)
		return
	}

	var last event.ID
	if !p.noTopic {
		start := time.Now()
		var err error
		if last, err = h.backfill(ctx, s, c, p); err != nil {
			if ctx.Err() == nil {
				log.Warn().Err(err).Str("context", c.String()).Msg("backfill failed; closing the stream")
			}
			reason = closeReason(ctx, err)
			return
		}
		h.o.Observer.Started(startKind(p, s), s.sent, time.Since(start))
	}
	q.harden()
	reason = h.live(ctx, log, s, cn, q, c, p, last)
}

// startKind names what the client's position was worth.
func startKind(p plan, s *sink) StartKind {
	switch {
	case !p.resume:
		return StartFresh
	case p.from.IsZero():
		return StartUnknown
	case s.reset:
		return StartReset
	}
	return StartExact
}

// closeReason is why a stream ended on err. A write that outlived its
// deadline is a client not reading; the client leaving makes writes fail
// too. net/http cancels the request on any failed write, so the deadline is
// checked first.
func closeReason(ctx context.Context, err error) CloseReason {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return CloseSlow
	case ctx.Err() != nil:
		return CloseClient
	}
	return CloseError
}

// live writes the queued events until the client leaves, falls behind, or
// the connection is retired, and says which.
func (h *Handler) live(ctx context.Context, log *zerolog.Logger, s *sink, cn *conn, q *queue, c store.Context, p plan, last event.ID) CloseReason {
	hb := time.NewTimer(h.o.Heartbeat)
	defer hb.Stop()
	var retire <-chan time.Time
	if h.o.MaxLifetime > 0 {
		t := time.NewTimer(h.o.MaxLifetime + rand.N(h.o.LifetimeJitter+1))
		defer t.Stop()
		retire = t.C
	}
	var expire <-chan time.Time
	if at, ok := expiry(ctx); ok {
		t := time.NewTimer(time.Until(at))
		defer t.Stop()
		expire = t.C
	}
	var spare []*frame
	for {
		select {
		case <-ctx.Done():
			return CloseClient
		case <-cn.stop:
			return CloseShutdown
		case <-retire:
			return CloseRotate
		case <-expire:
			return CloseExpired
		case <-hb.C:
			s.buf = append(s.buf, ": ping\n\n"...)
			if err := s.flushBuf(); err != nil {
				return closeReason(ctx, err)
			}
			hb.Reset(h.o.Heartbeat)
		case <-q.wake:
			frames, lost, failed := q.take(spare)
			if failed {
				log.Info().Str("context", c.String()).Str("last_id", last.String()).Msg("client too slow; disconnecting")
				return CloseSlow
			}
			if lost {
				var err error
				if last, err = h.pages(ctx, s, c, last); err != nil {
					return closeReason(ctx, err)
				}
			}
			var oldest event.ID
			n, size := 0, 0
			for _, f := range frames {
				if f.id.Compare(last) <= 0 {
					continue
				}
				b := f.bytesFor(p.tail)
				if err := s.write(b); err != nil {
					return closeReason(ctx, err)
				}
				if n == 0 {
					oldest = f.id
				}
				last = f.id
				n, size = n+1, size+len(b)
			}
			spare = frames
			if err := s.flush(); err != nil {
				return closeReason(ctx, err)
			}
			if n > 0 {
				h.o.Observer.Flushed(n, size, oldest)
			}
			hb.Reset(h.o.Heartbeat)
		}
	}
}

// backfill sends what the client lacks before the live events and returns
// the id of the last event sent (zero when none).
func (h *Handler) backfill(ctx context.Context, s *sink, c store.Context, p plan) (event.ID, error) {
	src := h.o.Store
	if p.resume {
		if p.from.IsZero() {
			return h.reset(ctx, s, c)
		}
		// Reading from just before the client's event proves that it is
		// still retained: otherwise the replay would be partial.
		evs, err := src.Range(ctx, c, store.RangeQuery{After: before(p.from), Limit: pageSize})
		if err != nil {
			return event.ID{}, err
		}
		if len(evs) == 0 || evs[0].ID != p.from {
			return h.reset(ctx, s, c)
		}
		last, err := s.events(evs[1:], p.from)
		if err != nil || len(evs) < pageSize {
			return last, err
		}
		return h.pages(ctx, s, c, last)
	}
	if p.limit == 0 {
		return p.from, nil // the live-only start, taken before the headers
	}
	n := p.limit
	if n <= pageSize {
		want := n
		if p.notice {
			want++ // one more tells whether the maximum cut
		}
		evs, err := src.Range(ctx, c, store.RangeQuery{Reverse: true, Limit: want})
		if err != nil {
			return event.ID{}, err
		}
		return h.newest(s, evs, n)
	}
	evs, err := src.Range(ctx, c, store.RangeQuery{Limit: pageSize})
	if err != nil {
		return event.ID{}, err
	}
	if len(evs) < pageSize {
		return s.events(evs, event.ID{})
	}
	info, err := src.Info(ctx, c)
	if err != nil {
		return event.ID{}, err
	}
	if info.Length > int64(n) {
		want := n
		if p.notice {
			want++
		}
		if evs, err = src.Range(ctx, c, store.RangeQuery{Reverse: true, Limit: want}); err != nil {
			return event.ID{}, err
		}
		return h.newest(s, evs, n)
	}
	last, err := s.events(evs, event.ID{})
	if err != nil {
		return last, err
	}
	return h.pages(ctx, s, c, last)
}

// newest sends evs, read newest first, oldest first, after the truncation
// notice when they are more than n.
func (h *Handler) newest(s *sink, evs []event.Event, n int) (event.ID, error) {
	if len(evs) > n {
		evs = evs[:n]
		s.buf = appendTruncated(s.buf, n)
	}
	slices.Reverse(evs)
	return s.events(evs, event.ID{})
}

// pages sends every event after last, a page at a time.
func (h *Handler) pages(ctx context.Context, s *sink, c store.Context, last event.ID) (event.ID, error) {
	for {
		evs, err := h.o.Store.Range(ctx, c, store.RangeQuery{After: last, Limit: pageSize})
		if err != nil {
			return last, err
		}
		if last, err = s.events(evs, last); err != nil || len(evs) < pageSize {
			return last, err
		}
	}
}

// reset tells a client whose position is unknown where the stream stands
// and continues from there.
func (h *Handler) reset(ctx context.Context, s *sink, c store.Context) (event.ID, error) {
	var state json.RawMessage
	var pos event.ID
	if h.o.State != nil {
		st, at, err := h.o.State(ctx, c)
		if err != nil {
			return event.ID{}, err
		}
		pos = at
		if len(st) > 0 {
			// A data line ends at a newline: the state must be one line.
			var b bytes.Buffer
			if err := json.Compact(&b, st); err != nil {
				return event.ID{}, fmt.Errorf("state of %s: %w", c, err)
			}
			state = b.Bytes()
		}
	} else {
		info, err := h.o.Store.Info(ctx, c)
		if err != nil {
			return event.ID{}, err
		}
		pos = info.LastID
	}
	s.buf = appendReset(s.buf, pos, state)
	s.reset = true
	return h.pages(ctx, s, c, pos)
}

// before is the largest id below id (id must not be zero).
func before(id event.ID) event.ID {
	if id.Seq > 0 {
		return event.ID{MS: id.MS, Seq: id.Seq - 1}
	}
	return event.ID{MS: id.MS - 1, Seq: ^uint64(0)}
}

// sink writes one connection's messages, each write under a deadline so that
// a client that stops reading costs at most WriteTimeout.
type sink struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	tail    bool   // the raw-tail form
	key     []byte // the raw-tail "stream" value, JSON-encoded
	buf     []byte // messages not yet written
	sent    int    // events written by backfill and replay
	reset   bool   // an `event: reset` was written
}

// flushSize is how much backfill is gathered before a write.
const flushSize = 32 << 10

func (s *sink) deadline() {
	// Not every ResponseWriter supports deadlines; those write without one.
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
}

func (s *sink) write(b []byte) error {
	s.deadline()
	_, err := s.w.Write(b)
	return err
}

func (s *sink) flush() error {
	s.deadline()
	return s.rc.Flush()
}

// flushBuf writes and flushes what buf holds.
func (s *sink) flushBuf() error {
	if len(s.buf) > 0 {
		if err := s.write(s.buf); err != nil {
			return err
		}
		s.buf = s.buf[:0]
	}
	return s.flush()
}

// events sends evs after last, flushing when done, and returns the new last.
func (s *sink) events(evs []event.Event, last event.ID) (event.ID, error) {
	for _, ev := range evs {
		if ev.ID.Compare(last) <= 0 {
			continue
		}
		var err error
		if s.tail {
			rec, e := ev.MarshalJSON()
			if e != nil {
				return last, e
			}
			s.buf = appendTail(s.buf, s.key, ev, rec)
		} else if s.buf, err = appendEvent(s.buf, ev); err != nil {
			return last, err
		}
		last = ev.ID
		s.sent++
		if len(s.buf) >= flushSize {
			if err := s.write(s.buf); err != nil {
				return last, err
			}
			s.buf = s.buf[:0]
		}
	}
	return last, s.flushBuf()
}

// release lets the connection's final bytes go out with a fresh deadline
// and drops the buffer, which idle connections should not hold.
func (s *sink) release() {
	s.deadline()
	s.buf = nil
}

// writeError writes the error body of openapi.yaml (Error).
func writeError(w http.ResponseWriter, status int, code, message string, fields map[string]string) {
	type body struct {
		Code    string            `json:"code"`
		Message string            `json:"message"`
		Fields  map[string]string `json:"fields,omitempty"`
	}
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "5")
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]body{"error": {Code: code, Message: message, Fields: fields}})
}
