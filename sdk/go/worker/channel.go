package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// The worker channel (docs/worker-protocol.md, The worker channel): one
// WebSocket to nqd, which pushes jobs as this worker's slots free up and
// answers its reports as the HTTP calls would. A report goes over the
// channel while one is open and over HTTP otherwise: a job is leased to the
// worker, not to the channel, so a drop only delays new offers.

// Transport is how a worker takes its jobs from nqd.
type Transport int

const (
	// Channel is the worker channel, falling back to HTTP for the worker's
	// life when nqd or a proxy cannot upgrade (an older nqd answers 404).
	// The default.
	Channel Transport = iota
	// HTTP is the claim long-poll and the HTTP calls only.
	HTTP
)

// errDropped fails a call whose channel ended before its answer: the call
// is repeated like one that got no answer over HTTP.
var errDropped = errors.New("worker: the channel to nqd dropped")

// errNoChannel says nqd (or a proxy before it) cannot open the channel:
// the worker takes its jobs over HTTP.
var errNoChannel = errors.New("worker: nqd offers no worker channel")

// chConn is one open channel.
type chConn struct {
	ws      *websocket.Conn
	refs    atomic.Uint64
	done    chan struct{} // closed once the read loop ends
	restart atomic.Bool   // nqd said it restarts: reconnect at once
	// nextInAck: nqd's welcome said a completion with next may take the
	// slot's next job in its ack rather than in an offer after it.
	nextInAck bool

	mu      sync.Mutex
	pending map[string]chan chAnswer
	ended   bool
}

type chAnswer struct {
	body json.RawMessage
	err  error
}

// inFrame is any frame nqd sends.
type inFrame struct {
	Type         string          `json:"type"`
	Ref          string          `json:"ref"`
	Body         json.RawMessage `json:"body"`
	Status       int             `json:"status"`
	RetryAfterMs int64           `json:"retryAfterMs"`
	Error        struct {
		Code    string            `json:"code"`
		Message string            `json:"message"`
		Fields  map[string]string `json:"fields"`
	} `json:"error"`
	Message   string `json:"message"`
	Jobs      []Job  `json:"jobs"`
	NextInAck bool   `json:"nextInAck"`
}

// call sends the request frame f (its ref filled in here) and decodes its
// ack's body into out; an error frame is a *StatusError as over HTTP.
func (c *chConn) call(ctx context.Context, f map[string]any, out any) error {
	ref := strconv.FormatUint(c.refs.Add(1), 36)
	f["ref"] = ref
	b, err := json.Marshal(f)
	if err != nil {
		return &EncodeError{Field: "the " + fmt.Sprint(f["type"]) + " frame", Err: err}
	}
	answer := make(chan chAnswer, 1)
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return errDropped
	}
	c.pending[ref] = answer
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, ref)
		c.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		return err
	}
	select {
	case a := <-answer:
		if a.err != nil || out == nil {
			return a.err
		}
		return json.Unmarshal(a.body, out)
	case <-c.done:
		return errDropped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// send writes a frame that has no answer (slots, pause).
func (c *chConn) send(v any) {
	b, _ := json.Marshal(v)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_ = c.ws.Write(ctx, websocket.MessageText, b)
}

// answer hands f, an ack or an error, to the call waiting for it.
func (c *chConn) answer(f inFrame) {
	a := chAnswer{body: f.Body}
	if f.Type == "error" {
		se := &StatusError{Status: f.Status, Code: f.Error.Code, Message: f.Error.Message, Fields: f.Error.Fields}
		if f.RetryAfterMs > 0 {
			se.RetryAfter = time.Duration(f.RetryAfterMs) * time.Millisecond
		}
		a.err = se
	}
	c.mu.Lock()
	ch := c.pending[f.Ref]
	c.mu.Unlock()
	if ch != nil {
		ch <- a
	}
}

// end marks the channel over: calls waiting fail with errDropped.
func (c *chConn) end() {
	c.mu.Lock()
	c.ended = true
	c.mu.Unlock()
	close(c.done)
}

// channelPath is the channel's route.
const channelPath = "/api/_workers/channel"

// dial opens the channel. A refusal is a *StatusError; one that says nqd
// or a proxy cannot upgrade (anything but 401, 403, 429 and 5xx other than
// 502) is errNoChannel.
func (c *client) dial(ctx context.Context) (*websocket.Conn, error) {
	h := http.Header{}
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range c.self {
		h[k] = v
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	ws, res, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(c.base, "http")+channelPath,
		&websocket.DialOptions{HTTPClient: c.http, HTTPHeader: h})
	if err == nil {
		ws.SetReadLimit(maxAnswer)
		return ws, nil
	}
	if res == nil {
		return nil, err // no answer: nqd is unreachable
	}
	se := &StatusError{Status: res.StatusCode, Message: http.StatusText(res.StatusCode)}
	if s, perr := strconv.Atoi(res.Header.Get("Retry-After")); perr == nil && s > 0 {
		se.RetryAfter = time.Duration(s) * time.Second
	}
	switch s := res.StatusCode; {
	case s == http.StatusUnauthorized, s == http.StatusForbidden, s == http.StatusTooManyRequests,
		s >= 500 && s != http.StatusBadGateway:
		return nil, se
	}
	return nil, fmt.Errorf("%w: %w", errNoChannel, se)
}

// channel returns the open channel, nil when there is none.
func (c *client) channel() *chConn { return c.ch.Load() }

// report sends a report about job j, call being "/heartbeat", "/events",
// "/complete" or "/fail", over the channel when one is open and over HTTP
// otherwise. next asks, with an outcome, for the slot's next job: over
// HTTP a completion's body has the claim for it, over the channel the
// frame says next instead, and a completion takes the job in its ack
// (its body's jobs, as over HTTP) when nqd welcomed nextInAck. It returns
// the channel that answered.
func (c *client) report(ctx context.Context, j Job, call string, body map[string]any, key string, next bool, out any) (*chConn, error) {
	ch := c.channel()
	if ch == nil {
		return nil, c.post(ctx, jobPath(j)+call, body, key, out)
	}
	f := make(map[string]any, len(body)+5)
	for k, v := range body {
		if k != "claim" {
			f[k] = v
		}
	}
	f["type"], f["queue"], f["jobId"] = call[1:], j.Queue, j.ID
	if key != "" {
		f["idempotencyKey"] = key
	}
	if next {
		f["next"] = true
		if call == "/complete" && ch.nextInAck {
			f["nextInAck"] = true
		}
	}
	return ch, ch.call(ctx, f, out)
}

// channels keeps the worker's channel open until ctx ends, reconnecting
// with backoff when it drops (at once after nqd said it restarts), and
// hands the jobs nqd offers to offered. connected gets one value once the
// first channel is open or cannot be: nil, errNoChannel or an error that
// stops the worker (401, 403, a refused hello). A later errNoChannel (nqd
// was replaced by one without the channel) goes to fallback.
func (w *worker) channels(ctx context.Context, connected chan<- error, fallback chan<- error) {
	wait := newBackOff()
	first := true
	tell := func(err error) {
		if first {
			connected <- err
			first = false
			return
		}
		select {
		case fallback <- err:
		default:
		}
	}
	for ctx.Err() == nil {
		c, err := w.connect(ctx)
		switch {
		case err == nil:
			if first {
				tell(nil)
			}
			wait.Reset()
			w.read(ctx, c)
			if c.restart.Load() {
				continue
			}
		case errors.Is(err, errNoChannel), !retriable(err):
			tell(err)
			return
		default:
			w.log.Warn("the worker channel could not be opened; trying again", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait.NextBackOff()):
		}
	}
	if first {
		connected <- ctx.Err()
	}
}

// connect opens a channel and says hello with the slots free now, and
// takes it as the worker's channel once nqd welcomed it.
func (w *worker) connect(ctx context.Context) (*chConn, error) {
	ws, err := w.c.dial(ctx)
	if err != nil {
		return nil, err
	}
	c := &chConn{ws: ws, done: make(chan struct{}), pending: map[string]chan chAnswer{}}
	hello := map[string]any{"type": "hello", "workerId": w.c.self.Get("Nqd-Worker-Id"),
		"name": w.c.self.Get("Nqd-Worker-Name"), "sdk": "go", "version": w.c.self.Get("Nqd-Worker-Version"),
		"host": w.c.self.Get("Nqd-Worker-Host"), "queues": w.cfg.Queues, "concurrency": w.cfg.Concurrency}
	// The slots counted and the channel taken at once: a job that ends
	// meanwhile is either counted free in the hello or told with slots.
	w.slotMu.Lock()
	hello["slots"] = max(w.cfg.Concurrency-len(w.slots)-w.waiting, 0)
	if w.paused {
		hello["slots"] = 0
	}
	b, _ := json.Marshal(hello)
	werr := ws.Write(ctx, websocket.MessageText, b)
	w.slotMu.Unlock()
	if werr != nil {
		_ = ws.CloseNow()
		return nil, werr
	}
	rctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_, b, err = ws.Read(rctx)
	var f inFrame
	if err == nil {
		err = json.Unmarshal(b, &f)
	}
	if err == nil && f.Type != "welcome" {
		err = fmt.Errorf("worker: nqd refused the channel's hello: %w",
			&StatusError{Status: f.Status, Code: f.Error.Code, Message: f.Error.Message, Fields: f.Error.Fields})
	}
	if err != nil {
		_ = ws.CloseNow()
		return nil, err
	}
	c.nextInAck = f.NextInAck
	w.slotMu.Lock()
	w.c.ch.Store(c)
	w.slotMu.Unlock()
	return c, nil
}

// read takes c's frames until it ends or ctx does.
func (w *worker) read(ctx context.Context, c *chConn) {
	defer func() {
		w.slotMu.Lock()
		w.c.ch.CompareAndSwap(c, nil)
		w.slotMu.Unlock()
		c.end()
		_ = c.ws.CloseNow()
	}()
	stop := context.AfterFunc(ctx, func() { _ = c.ws.Close(websocket.StatusNormalClosure, "worker stopped") })
	defer stop()
	for {
		_, b, err := c.ws.Read(context.Background())
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("the worker channel dropped; reconnecting", "err", err)
			}
			return
		}
		var f inFrame
		if err := json.Unmarshal(b, &f); err != nil {
			w.log.Error("nqd sent a frame that is not JSON", "err", err)
			continue
		}
		switch f.Type {
		case "ack":
			c.answer(f)
		case "error":
			if f.Ref == "" {
				w.log.Error("nqd refused a frame", "status", f.Status, "code", f.Error.Code, "message", f.Error.Message+f.Message)
				continue
			}
			c.answer(f)
		case "offer":
			w.offered(f.Jobs)
		case "server-restart":
			c.restart.Store(true)
		}
	}
}

// slotWait bounds how long an offered job waits for the slot nqd counted
// free: the job before it in the slot is returning.
const slotWait = callTimeout

// offered runs the jobs nqd offered, each in a slot. nqd offers no more
// than the slots it counts free, but a slot may be a moment from being
// let go by the job that held it.
func (w *worker) offered(jobs []Job) {
	w.slotMu.Lock()
	defer w.slotMu.Unlock()
	for _, j := range jobs {
		if w.stopping {
			// Run waits for the jobs: none starts once it does; the job
			// goes back to its queue when its lease runs out.
			w.log.Warn("a job offered while the worker stops is left to its lease", "run", j.RunID, "step", j.Step)
			continue
		}
		w.waiting++
		w.wg.Go(func() {
			t := time.NewTimer(slotWait)
			defer t.Stop()
			took := false
			select {
			case w.slots <- struct{}{}:
				took = true
			case <-t.C:
			}
			w.slotMu.Lock()
			w.waiting--
			w.slotMu.Unlock()
			if !took {
				w.log.Error("nqd offered a job beyond the free slots; it is left to its lease", "run", j.RunID, "step", j.Step)
				return
			}
			w.runSlot(j)
		})
	}
}

// release lets go of a slot. Unless nqd counted the slot free itself (an
// ack of the outcome with next over the open channel, freedOn), the open
// channel is told.
func (w *worker) release(freedOn *chConn) {
	w.slotMu.Lock()
	<-w.slots
	c := w.c.channel()
	tell := c != nil && c != freedOn && !w.paused
	w.slotMu.Unlock()
	// Sent outside the lock, which the read loop takes for offers: should
	// c have dropped meanwhile, the next hello counted the slot free.
	if tell {
		c.send(map[string]any{"type": "slots", "add": 1})
	}
}

// pause tells nqd to offer nothing more: the worker stops.
func (w *worker) pause() {
	w.slotMu.Lock()
	w.paused = true
	c := w.c.channel()
	w.slotMu.Unlock()
	if c != nil {
		c.send(map[string]any{"type": "pause"})
	}
}
