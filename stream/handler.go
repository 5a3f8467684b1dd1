package stream

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/hlog"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/outage"
	"github.com/nqd-dev/nqd/store"
)

// Handler serves the SSE streams (the routes are described in openapi.yaml)
// from one Hub.
type Handler struct {
	o   Options
	hub *Hub
	// failing logs the store failures that refuse or end streams as they
	// start: during an outage every client reconnects again and again,
	// and each attempt is not worth a line.
	failing *outage.Log

	mu       sync.Mutex
	conns    map[*conn]struct{}
	draining bool
	idle     chan struct{} // closed when draining and the last connection is gone
	poll     *poller       // watches taken connections; made at the first
	noPoll   bool          // the poller cannot be made here, or is closed
}

// NewHandler builds the handler and its hub.
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
		failing: outage.New(o.Log, "stream start (subscribe and backfill)"),
		conns:   map[*conn]struct{}{},
		idle:    make(chan struct{}),
	}
}

// ErrOutage marks a refusal for a store failure that the handler has logged
// already, once for the outage: the caller answers it (503, Retry-After)
// without a line of its own.
var ErrOutage = errors.New("logged once per store outage")

// Ready reports whether the live path works; /readyz fails while it does not.
func (h *Handler) Ready() error { return h.hub.Ready() }

// Close ends the hub's subscriptions and the poller of taken connections
// (any still open are then watched by a goroutine each). Call it after Drain.
func (h *Handler) Close() {
	h.hub.Close()
	h.mu.Lock()
	p := h.poll
	h.poll, h.noPoll = nil, true
	h.mu.Unlock()
	if p != nil {
		p.close()
	}
}

// BackfillMax as Request.Backfill sends as many of the newest events as
// Options.MaxBackfill allows, after a notice when that cuts.
const BackfillMax = -1

// Request is one stream a client asks for, already read from the HTTP
// request and authorized by the caller.
type Request struct {
	// Context is the context streamed; the zero Context when Quiet.
	Context store.Context
	// Tail asks for the raw-tail form that the v0.3 UI reads
	// (docs/compatibility.md): live events only unless the client resumes.
	Tail bool
	// Quiet asks for no stream at all: an open stream of heartbeats.
	Quiet bool
	// Resume says the client named the last event it has: From, or the
	// zero ID when what it sent was not an id (it then gets a reset).
	Resume bool
	From   event.ID
	// Backfill is, without Resume, how many of the newest events to send
	// before the live ones, capped at Options.MaxBackfill; BackfillMax for
	// the cap itself.
	Backfill int
	// Expiry ends the stream when the credential that opened it expires;
	// the zero time never does.
	Expiry time.Time
	// RequestID and Client name the request in the log lines a stream
	// writes once net/http has let go of it (see takeOver), which then
	// holds these two strings rather than the request's logger.
	RequestID, Client string
	// Release, when set, is called once when the stream ends or is refused,
	// from whichever goroutine ends it: Serve may return while the stream
	// goes on (see takeOver).
	Release func()
}

// ErrDraining refuses a stream while the handler drains: the client should
// reconnect, to another instance.
var ErrDraining error = &nqd.Error{Code: nqd.CodeUnavailable, Message: "The server is shutting down; reconnect."}

// errNoStreaming refuses a stream on a connection that cannot flush.
var errNoStreaming = errors.New("stream: the connection cannot stream")

// plan is what a connection sends before going live.
type plan struct {
	resume  bool     // the client named the last event it has
	from    event.ID // that event (zero when it was not an id); live only: the start
	limit   int      // without resume: the newest events to send
	notice  bool     // limit is the configured maximum: say when it cuts
	tail    bool     // the raw-tail form
	noTopic bool     // no stream at all: heartbeats only
}

func (h *Handler) plan(req Request) plan {
	p := plan{resume: req.Resume, from: req.From, tail: req.Tail, noTopic: req.Quiet}
	switch {
	case p.resume || p.tail:
	case req.Backfill < 0:
		p.limit, p.notice = h.o.MaxBackfill, true
	default:
		p.limit, p.notice = min(req.Backfill, h.o.MaxBackfill), req.Backfill > h.o.MaxBackfill
	}
	return p
}

func (h *Handler) logger(r *http.Request) *zerolog.Logger {
	if l := hlog.FromRequest(r); l.GetLevel() != zerolog.Disabled {
		return l
	}
	return &h.o.Log
}

// Serve streams req on w: the context's events as backfill then live, or the
// events after the client's last one. It returns an error only when it
// refuses the stream before the response starts, for the caller to answer:
// ErrDraining, or a store failure wrapping store.ErrUnavailable. Once the
// response has started, the stream's end is told to the Observer.
func (h *Handler) Serve(w http.ResponseWriter, r *http.Request, req Request) error {
	c, p := req.Context, h.plan(req)
	log := h.logger(r)
	// Room for the four things a stream gives back (ending), at once.
	end := &ending{reason: CloseError, fns: make([]func(), 0, 4)}
	end.add(req.Release)
	handed := false // to a taken connection, which ends the stream itself
	defer func() {
		if !handed {
			end.run()
		}
	}()
	if _, ok := w.(http.Flusher); !ok {
		return errNoStreaming
	}
	cn, ok := h.register()
	if !ok {
		return ErrDraining
	}
	end.add(func() { h.unregister(cn) })

	ctx := r.Context()
	q := newQueue(p.tail, h.o.QueueEvents, h.o.QueueBytes)
	// st is set when this stream started its context's topic, which then
	// waits for this stream's first read of the stream's end: it must be
	// told, or told there is none, as soon as possible.
	var st *starter
	if !p.noTopic {
		var t *topic
		var err error
		if t, st, err = h.hub.join(ctx, c, q); err != nil {
			return h.unavailable(ctx.Err(), "subscribe to", c, err)
		}
		defer st.done()
		end.add(func() { h.hub.leave(t, q) })
	}
	if h.o.Hooks.AfterSubscribe != nil {
		h.o.Hooks.AfterSubscribe()
	}
	if !p.noTopic && !p.resume && p.limit == 0 {
		// Live only: the client gets exactly what is appended after the
		// stream's end as it is before the response starts.
		info, err := h.o.Store.Info(ctx, c)
		if err != nil {
			return h.unavailable(ctx.Err(), "read the end of", c, err)
		}
		p.from = info.LastID
		st.at(p.from)
	}

	s := &sink{w: w, rc: http.NewResponseController(w), timeout: h.o.WriteTimeout, tail: p.tail}
	// The response starts with the first write: a backfill whose first read
	// fails has sent nothing, and the client is told to retry (503).
	s.begin = func() {
		hdr := w.Header()
		hdr.Set("Content-Type", "text/event-stream")
		hdr.Set("Cache-Control", "no-cache, no-transform")
		hdr.Set("X-Accel-Buffering", "no")
		if r.ProtoMajor == 1 {
			// An HTTP/1.x stream's connection ends with the stream: a taken
			// connection (takeover.go) is closed after its last chunk. Saying
			// so keeps a client from reusing it for its next request.
			hdr.Set("Connection", "close")
		}
		hdr.Del("Content-Length")
		w.WriteHeader(http.StatusOK)
		h.o.Observer.Opened(c)
		end.add(func() { h.o.Observer.Closed(c, end.reason) })
	}
	// A deadline in the past fails the write in progress at once: an
	// overflowing client is cut at the queue bound, not WriteTimeout later.
	q.onFail(func() { _ = s.rc.SetWriteDeadline(time.Now()) })
	if p.tail {
		s.key, _ = json.Marshal(h.o.Prefix + ":" + c.String())
	}
	defer func() {
		if !handed {
			s.release()
		}
	}()
	s.buf = fmt.Appendf(s.buf, ": nqd\nretry: %d\n\n", h.o.Retry.Milliseconds())

	var last event.ID
	var sent time.Duration // the backfill's time
	if !p.noTopic {
		start := time.Now()
		var err error
		if last, err = h.backfill(ctx, s, c, p, st); err != nil {
			if !s.started() {
				return h.unavailable(ctx.Err(), "backfill", c, err)
			}
			if ctx.Err() == nil {
				h.failing.Failed(fmt.Errorf("backfill %s, closing its stream: %w", c, err))
			}
			end.reason = closeReason(ctx, err)
			return nil
		}
		h.failing.Succeeded()
		// Told by the read that found the stream's end already; else the
		// last read's end, which the backfill returns, is the position.
		st.at(last)
		sent = time.Since(start)
	}
	// The live-only start and the quiet stream have sent nothing yet.
	if err := s.flushBuf(); err != nil {
		end.reason = closeReason(ctx, err)
		return nil
	}
	if !p.noTopic {
		h.o.Observer.Started(startKind(p, s), s.sent, sent)
	}
	q.harden()
	// Only an HTTP/1.1 response is chunked, the framing a taken connection
	// continues; HTTP/1.0 (a proxy's default, as nginx's) and HTTP/2 stay.
	if r.ProtoMajor == 1 && r.ProtoMinor >= 1 {
		handed = h.takeOver(s, req, cn, q, p, last, end)
	}
	if handed {
		return nil
	}
	end.reason = h.live(ctx, log, s, cn, q, c, p, last, req.Expiry)
	return nil
}

// ending is what a stream gives back when it ends, last taken first: the
// caller's Release, its place among the open streams, its queue's place in
// the hub, and the Observer's count. Serve runs it on return unless the
// stream was handed over to a taken connection, which then runs it.
type ending struct {
	fns    []func()
	reason CloseReason // told to the Observer
}

func (e *ending) add(f func()) {
	if f != nil {
		e.fns = append(e.fns, f)
	}
}

func (e *ending) run() {
	for i := len(e.fns) - 1; i >= 0; i-- {
		e.fns[i]()
	}
	e.fns = nil
}

// unavailable is the refusal of a stream whose store call failed: the
// request's own end (cause) when the client left, else the store failure,
// logged once per outage and marked ErrOutage.
func (h *Handler) unavailable(cause error, what string, c store.Context, err error) error {
	err = unavailable(cause, what, c, err)
	if cause != nil {
		return err
	}
	h.failing.Failed(err)
	return fmt.Errorf("%w (%w)", err, ErrOutage)
}

// unavailable is a failed store call's error: the request's own end (cause)
// when the client left, else the store failure, as store.ErrUnavailable.
func unavailable(cause error, what string, c store.Context, err error) error {
	if cause != nil {
		return cause
	}
	if errors.Is(err, store.ErrUnavailable) {
		return fmt.Errorf("%s %s: %w", what, c, err)
	}
	return fmt.Errorf("%s %s: %w: %w", what, c, store.ErrUnavailable, err)
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
