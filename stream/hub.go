// Package stream pushes context events to browsers over Server-Sent Events
// (the frames are in openapi.yaml; the path of an event in
// docs/architecture.md): a per-instance Hub that holds one store subscription
// per context and fans each event out, encoded once, to bounded
// per-connection queues; and the HTTP handlers that backfill, resume and
// stream.
package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/outage"
	"github.com/nqd-dev/nqd/store"
)

// Source is what streaming needs from a store; see store.Store.
type Source interface {
	Range(ctx context.Context, c store.Context, q store.RangeQuery) ([]event.Event, error)
	Info(ctx context.Context, c store.Context) (store.StreamInfo, error)
	Subscribe(ctx context.Context, c store.Context, buffer int) (store.Subscription, error)
}

// pageSize bounds one stream read: large enough to amortise a round trip,
// small enough that the first events leave quickly.
const pageSize = 1000

// storeTimeout bounds one store call made by the hub itself.
const storeTimeout = 10 * time.Second

// hubOptions tune a Hub; zero values get defaults in newHub.
type hubOptions struct {
	Prefix     string        // key prefix, for the raw-tail form
	Buffer     int           // store subscription buffer
	Check      time.Duration // top-of-stream check interval; < 0 disables
	MaxBackoff time.Duration // cap on the wait between resubscribe attempts
	TrustLive  bool          // the feed never skips an event silently
	Observer   Observer      // nopObserver when nil
}

// Hub shares store subscriptions between an instance's connections: at most
// one per context, held while any connection of the context is open. It
// delivers each context's events in id order with no gap, repairing from the
// stream whatever the live feed lost.
type Hub struct {
	src  Source
	log  zerolog.Logger
	opts hubOptions

	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	topics map[store.Context]*topic

	broken   atomic.Int64 // topics whose live feed is down right now
	repaired atomic.Int64 // catch-ups that found events the live feed missed
	// failing logs the live feeds' and repair reads' failures, which
	// every topic meets at once when the store goes down, as one outage.
	failing *outage.Log
}

func newHub(src Source, log zerolog.Logger, o hubOptions) *Hub {
	if o.Buffer <= 0 {
		o.Buffer = 256
	}
	if o.Check == 0 {
		o.Check = 500 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Hub{src: src, log: log, opts: o, ctx: ctx, cancel: cancel, topics: map[store.Context]*topic{},
		failing: outage.New(log, "live feed")}
}

// errLiveDown reports that some context has no live feed.
var errLiveDown = errors.New("live feed down")

// Ready reports whether every context in use has a working live feed.
func (h *Hub) Ready() error {
	if n := h.broken.Load(); n > 0 {
		return fmt.Errorf("%w for %d contexts", errLiveDown, n)
	}
	return nil
}

// Close ends every subscription. Connections still attached stop receiving.
func (h *Hub) Close() {
	h.cancel()
}

// topic is one context's live feed on this instance.
type topic struct {
	hub    *Hub
	c      store.Context
	key    []byte // the raw-tail "stream" value, JSON-encoded
	ctx    context.Context
	cancel context.CancelFunc
	subbed chan struct{} // closed when the subscription is made or err set
	ready  chan struct{} // closed when the feed's start is settled too
	err    error
	refs   int // guarded by hub.mu
	// startAt takes the position the feed starts after from the connection
	// that started the topic, or is closed empty when it has none to give.
	startAt chan event.ID

	mu    sync.Mutex
	subs  map[*queue]struct{}
	tails int // attached queues that want the raw-tail form

	// Owned by the run goroutine.
	last  event.ID // the newest event delivered, or the stream's end at start
	dirty bool     // a catch-up failed and must be retried
}

// join attaches q to c's feed, subscribing first if no other connection of
// c has. Every event appended after join returns reaches q (or marks it lost).
//
// The connection that makes the subscription gets a starter: it attaches as
// soon as the subscription is made, and the first of its reads that reaches
// the stream's end gives the position the feed starts after (see starter).
// The others attach once that position is settled, so that their own reads
// start after it.
func (h *Hub) join(ctx context.Context, c store.Context, q *queue) (*topic, *starter, error) {
	h.mu.Lock()
	t := h.topics[c]
	create := t == nil
	if create {
		tctx, cancel := context.WithCancel(h.ctx)
		key, _ := json.Marshal(h.opts.Prefix + ":" + c.String())
		t = &topic{hub: h, c: c, key: key, ctx: tctx, cancel: cancel, subbed: make(chan struct{}), ready: make(chan struct{}),
			startAt: make(chan event.ID, 1), subs: map[*queue]struct{}{}}
		h.topics[c] = t
	}
	t.refs++
	h.mu.Unlock()
	var st *starter
	wait := t.ready
	if create {
		st = &starter{t: t}
		wait = t.subbed
		go t.start()
	}
	select {
	case <-wait:
	case <-ctx.Done():
		st.done()
		h.leave(t, nil)
		return nil, nil, ctx.Err()
	}
	if t.err != nil {
		st.done()
		h.leave(t, nil)
		return nil, nil, t.err
	}
	t.mu.Lock()
	t.subs[q] = struct{}{}
	if q.tail {
		t.tails++
	}
	t.mu.Unlock()
	return t, st, nil
}

// starter is the connection that started a topic, which owes it the
// position its live feed starts after: the end of the stream as read by the
// first of the connection's reads that reaches it. That read starts after
// the subscription is made, so every event after the position arrives live;
// the connection's own backfill holds every event up to it; and the other
// connections attach only once it is settled, so theirs do too. This saves
// the topic a read of the stream's end of its own. A nil starter does
// nothing.
type starter struct {
	t    *topic
	once sync.Once
}

// at gives pos, the stream's end as a read found it; only the first call
// counts.
func (s *starter) at(pos event.ID) {
	if s != nil {
		s.once.Do(func() { s.t.startAt <- pos })
	}
}

// done says the connection gives no position (any more): its backfill
// failed or it left first. The topic then reads the stream's end itself.
func (s *starter) done() {
	if s != nil {
		s.once.Do(func() { close(s.t.startAt) })
	}
}

// leave detaches q (nil when it never attached) and drops the subscription
// with the last connection.
func (h *Hub) leave(t *topic, q *queue) {
	if q != nil {
		t.mu.Lock()
		if _, ok := t.subs[q]; ok {
			delete(t.subs, q)
			if q.tail {
				t.tails--
			}
		}
		t.mu.Unlock()
	}
	h.mu.Lock()
	t.refs--
	last := t.refs == 0
	if last && h.topics[t.c] == t {
		delete(h.topics, t.c)
	}
	h.mu.Unlock()
	if last {
		t.cancel()
	}
}

// start subscribes, waits for the position the feed starts after (see
// starter), and runs the feed.
func (t *topic) start() {
	sub, err := t.subscribe()
	if err != nil {
		t.fail(err)
		close(t.subbed)
		close(t.ready)
		return
	}
	close(t.subbed)
	select {
	case pos, ok := <-t.startAt:
		if ok {
			t.last = pos
			break
		}
		ctx, cancel := context.WithTimeout(t.ctx, storeTimeout)
		info, err := t.hub.src.Info(ctx, t.c)
		cancel()
		t.last = info.LastID
		if err != nil {
			sub.Close()
			t.fail(err)
			close(t.ready)
			return
		}
	case <-t.ctx.Done():
		// Every connection left: no one waits for ready.
		sub.Close()
		t.fail(t.ctx.Err())
		close(t.ready)
		return
	}
	close(t.ready)
	t.run(sub)
}

// fail records why the topic could not start and takes it out of the hub,
// so that the next connection of its context starts anew.
func (t *topic) fail(err error) {
	t.err = err
	t.hub.mu.Lock()
	if t.hub.topics[t.c] == t {
		delete(t.hub.topics, t.c)
	}
	t.hub.mu.Unlock()
}

func (t *topic) subscribe() (store.Subscription, error) {
	ctx, cancel := context.WithTimeout(t.ctx, storeTimeout)
	defer cancel()
	// The subscription outlives this call: it is bound to the topic's
	// context, not to the timeout of the call that makes it.
	sub, err := t.hub.src.Subscribe(t.ctx, t.c, t.hub.opts.Buffer)
	if err == nil {
		return sub, nil
	}
	if ctx.Err() != nil && t.ctx.Err() == nil {
		return nil, fmt.Errorf("subscribe to %s: %w", t.c, store.ErrUnavailable)
	}
	return nil, err
}

// run delivers live events until the last connection leaves, replacing the
// subscription when it ends and repairing what the live feed missed.
func (t *topic) run(sub store.Subscription) {
	defer func() {
		if sub != nil {
			sub.Close()
		}
	}()
	var tick <-chan time.Time
	if t.hub.opts.Check > 0 {
		tk := time.NewTicker(t.hub.opts.Check)
		defer tk.Stop()
		tick = tk.C
	}
	// seen is the stream's end at the previous check: anything up to it
	// that has not arrived live one interval later was lost.
	var seen event.ID
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-sub.Ready():
			ended := false
			for !ended {
				ev, ok, live := sub.Next()
				if !ok {
					ended = !live
					break
				}
				t.hub.opts.Observer.Received(ev.ID)
				ended = t.receive(sub, ev)
			}
			if ended {
				err := sub.Err()
				if t.ctx.Err() != nil {
					return
				}
				t.hub.failing.Failed(fmt.Errorf("%s: live feed ended: %w", t.c, err))
				sub.Close()
				if sub = t.resubscribe(); sub == nil {
					return
				}
				t.hub.opts.Observer.Resubscribed()
				t.catchUp()
			}
		case <-tick:
			if t.dirty || (!seen.IsZero() && t.last.Compare(seen) < 0) {
				t.catchUp()
			}
			ctx, cancel := context.WithTimeout(t.ctx, storeTimeout)
			info, err := t.hub.src.Info(ctx, t.c)
			cancel()
			if err == nil {
				seen = info.LastID
			}
		}
	}
}

// resubscribe retries with backoff until it gets a subscription, or returns
// nil when the topic ends first. The topic counts as broken meanwhile.
func (t *topic) resubscribe() store.Subscription {
	t.hub.broken.Add(1)
	defer t.hub.broken.Add(-1)
	wait := 50 * time.Millisecond
	for {
		sub, err := t.subscribe()
		if err == nil {
			t.hub.failing.Succeeded()
			return sub
		}
		if t.ctx.Err() != nil {
			return nil
		}
		t.hub.failing.Failed(fmt.Errorf("%s: resubscribe: %w", t.c, err))
		select {
		case <-t.ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, t.hub.opts.MaxBackoff)
	}
}

// follows reports whether id is provably the event after last: stream ids
// number the events of one millisecond from 0, so a sequence above 0 names
// its predecessor. Across milliseconds nothing can be told from ids alone;
// a feed that sends each event's predecessor (event.Event.Prev) tells it
// for every event, and receive takes that too.
func follows(last, id event.ID) bool {
	return id.Seq > 0 && last == event.ID{MS: id.MS, Seq: id.Seq - 1}
}

// receive delivers ev and the events already waiting behind it. Unless the
// live feed is trusted, events that do not provably follow the last one are
// checked against the stream, read once for the whole batch, so that a
// message the feed skipped is delivered in its place. It reports whether the
// subscription ended.
func (t *topic) receive(sub store.Subscription, ev event.Event) (ended bool) {
	if ev.ID.Compare(t.last) <= 0 || follows(t.last, ev.ID) || t.hub.opts.TrustLive && ev.ID.Seq == 0 ||
		!ev.Prev.IsZero() && ev.Prev == t.last {
		t.deliver(ev)
		return false
	}
	batch := []event.Event{ev}
	for len(batch) < pageSize {
		e, ok, live := sub.Next()
		if !ok {
			ended = !live
			break
		}
		t.hub.opts.Observer.Received(e.ID)
		batch = append(batch, e)
	}
	through := batch[len(batch)-1].ID
	ctx, cancel := context.WithTimeout(t.ctx, storeTimeout)
	evs, err := t.hub.src.Range(ctx, t.c, store.RangeQuery{After: t.last, Through: through})
	cancel()
	if err != nil {
		// Unverified is better than stalled; the periodic check retries
		// what is missing at the end of the stream.
		t.dirty = true
		evs = batch
	} else if n := len(evs) - countAfter(batch, t.last); n > 0 {
		t.hub.repaired.Add(1)
		t.hub.opts.Observer.Repaired(n)
	}
	for _, e := range evs {
		t.deliver(e)
	}
	return ended
}

func countAfter(evs []event.Event, last event.ID) int {
	n := 0
	for _, e := range evs {
		if e.ID.Compare(last) > 0 {
			n++
		}
	}
	return n
}

// catchUp reads the stream after the last delivered event and delivers what
// it finds. Live events it overtakes are dropped by deliver when they come.
func (t *topic) catchUp() {
	t.dirty = false
	for {
		ctx, cancel := context.WithTimeout(t.ctx, storeTimeout)
		evs, err := t.hub.src.Range(ctx, t.c, store.RangeQuery{After: t.last, Limit: pageSize})
		cancel()
		if err != nil {
			if t.ctx.Err() == nil {
				t.dirty = true
				t.hub.failing.Failed(fmt.Errorf("%s: repair read, retried at the next check: %w", t.c, err))
			}
			return
		}
		if len(evs) > 0 {
			t.hub.repaired.Add(1)
			t.hub.opts.Observer.Repaired(len(evs))
		}
		for _, ev := range evs {
			t.deliver(ev)
		}
		if len(evs) < pageSize {
			return
		}
	}
}

// deliver encodes ev once and offers it to every attached queue, dropping
// the queues that fail.
func (t *topic) deliver(ev event.Event) {
	if ev.ID.Compare(t.last) <= 0 {
		return
	}
	t.last = ev.ID
	rec, err := ev.MarshalJSON()
	if err != nil {
		t.hub.log.Error().Err(err).Str("context", t.c.String()).Str("id", ev.ID.String()).Msg("cannot encode event")
		return
	}
	f := &frame{id: ev.ID, ev: ev, data: appendEventRecord(make([]byte, 0, len(rec)+len(ev.Kind)+64), ev, rec)}
	start := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	defer func() { t.hub.opts.Observer.Broadcast(len(t.subs), time.Since(start)) }()
	if t.tails > 0 {
		f.tail = appendTail(make([]byte, 0, len(rec)+len(t.key)+64), t.key, ev, rec)
	}
	for q := range t.subs {
		if !q.push(f) {
			delete(t.subs, q)
			if q.tail {
				t.tails--
			}
		}
	}
}
