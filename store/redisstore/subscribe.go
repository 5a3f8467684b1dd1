package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/internal/subq"
)

// probeTimeout bounds the wait for the answer to a periodic live-path PING
// (less when probes are more frequent).
const probeTimeout = 5 * time.Second

// unsubscribeDelay is how long a channel stays subscribed in Redis after its
// last local subscriber left. The channels left meanwhile are unsubscribed in
// one command, and a subscriber that comes back to one in time needs no
// SUBSCRIBE at all (a stream is often closed and opened again at once, by a
// reconnecting client or by the next page that shows the run).
const unsubscribeDelay = 50 * time.Millisecond

// errNoPong ends a connection whose PING went unanswered: it is wedged even
// though no read failed.
var errNoPong = errors.New("pub/sub connection did not answer PING")

// Subscribe attaches to c's live channel on the Store's one shared Pub/Sub
// connection. It returns once Redis has confirmed that the connection is
// subscribed to the channel, so every event appended afterwards is
// delivered. Errors: store.ErrInvalid,
// store.ErrClosed, store.ErrUnavailable, or the context's error.
func (s *Store) Subscribe(ctx context.Context, c store.Context, buffer int) (store.Subscription, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("redisstore: subscribe: %w", store.ErrClosed)
	}
	if !c.Valid() {
		return nil, invalid("subscribe", "context %q", c)
	}
	if buffer <= 0 {
		buffer = s.opts.SubscriptionBuffer
	}
	sh := s.on(c.ID)
	return sh.feed.subscribe(ctx, sh.channel(c), buffer)
}

// liveFeed multiplexes every subscription of a Store over one Pub/Sub connection,
// subscribing to a channel in Redis while at least one local subscriber wants
// it. Each message is decoded once and fanned out without ever blocking: a
// subscriber whose queue is full is ended with store.ErrOverflow.
//
// SUBSCRIBE and UNSUBSCRIBE commands are written by one goroutine per
// connection (writeLoop), never under mu: the channels asked for while a
// write is on its way go in the next command together, and channels left by
// their last subscriber are unsubscribed unsubscribeDelay later, together.
type liveFeed struct {
	client     redis.UniversalClient
	probeEvery time.Duration
	unsubDelay time.Duration // unsubscribeDelay; a test may set another before the first Subscribe
	log        zerolog.Logger
	// anchor, set on a Redis Cluster, is a channel in the slot of every
	// channel of the store that nobody publishes on: the feed then uses
	// sharded Pub/Sub (SSUBSCRIBE), subscribes anchor first so that the
	// connection goes to the primary serving the slot, and takes Redis
	// unsubscribing it as the slot moving elsewhere.
	anchor string

	mu     sync.Mutex
	conn   *liveConn // nil until needed, and again after a break
	closed bool
	seq    uint64 // makes PING payloads unique
	wg     sync.WaitGroup
}

// liveConn is one Pub/Sub connection and the subscriptions riding on it. When
// it breaks, every one of them ends with store.ErrLiveLost (events may have
// been missed, so they resume from the stream) and the feed opens a new
// connection for later subscribers. Fields are guarded by feed.mu.
type liveConn struct {
	ps       *redis.PubSub
	channels map[string]*channelSubs
	// pending counts SUBSCRIBE replies not yet read, per channel: after an
	// unsubscribe and a quick resubscribe, the older reply must not be
	// mistaken for the confirmation of the newer SUBSCRIBE.
	pending map[string]int
	// toSub lists the SUBSCRIBEs to write, in order; toUnsub the channels
	// without local subscribers to UNSUBSCRIBE once unsubscribeDelay
	// passed. A channel is in at most one of channels and toUnsub; its last
	// command (written or queued) is a SUBSCRIBE exactly when it is in
	// either. kick wakes writeLoop.
	toSub    []string
	toUnsub  map[string]struct{}
	kick     chan struct{}
	pings    map[string]chan struct{}
	finished bool
	err      error
	done     chan struct{} // closed when finished
}

type channelSubs struct {
	subs      map[*subscription]struct{}
	confirmed bool
	ready     chan struct{} // closed when confirmed
}

func newLiveFeed(client redis.UniversalClient, probeEvery time.Duration, log zerolog.Logger) *liveFeed {
	return &liveFeed{client: client, probeEvery: probeEvery, unsubDelay: unsubscribeDelay, log: log}
}

func (f *liveFeed) subscribe(ctx context.Context, channel string, buffer int) (*subscription, error) {
	// A connection that breaks before Redis confirms is most often one that
	// died while idle; a fresh one deserves one more try.
	for attempt := 0; ; attempt++ {
		sub := &subscription{feed: f, channel: channel, q: subq.New(buffer)}
		lc, ready, err := f.attach(ctx, sub)
		if err != nil {
			return nil, err
		}
		select {
		case <-ready:
			sub.watch(ctx)
			return sub, nil
		case <-lc.done:
			if errors.Is(lc.err, store.ErrClosed) {
				return nil, fmt.Errorf("redisstore: subscribe: %w", store.ErrClosed)
			}
			if attempt == 0 {
				continue
			}
			return nil, fmt.Errorf("redisstore: subscribe: %w: %w", store.ErrUnavailable, lc.err)
		case <-ctx.Done():
			f.detach(sub, ctx.Err())
			return nil, ctx.Err()
		}
	}
}

// attach registers sub on the current connection, queueing a SUBSCRIBE if
// the channel is not subscribed in Redis, and returns what to wait on.
func (f *liveFeed) attach(ctx context.Context, sub *subscription) (*liveConn, <-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, nil, fmt.Errorf("redisstore: subscribe: %w", store.ErrClosed)
	}
	lc := f.connLocked()
	cs := lc.channels[sub.channel]
	if cs == nil {
		cs = &channelSubs{subs: map[*subscription]struct{}{}, ready: make(chan struct{})}
		lc.channels[sub.channel] = cs
		// Without local subscribers, the channel is still subscribed in
		// Redis while its UNSUBSCRIBE waits in toUnsub.
		_, subscribed := lc.toUnsub[sub.channel]
		delete(lc.toUnsub, sub.channel)
		switch {
		case !subscribed:
			lc.pending[sub.channel]++
			lc.toSub = append(lc.toSub, sub.channel)
			lc.wake()
		case lc.pending[sub.channel] == 0:
			// Still subscribed, its UNSUBSCRIBE not yet written: every
			// message published from now on reaches cs.
			cs.confirmed = true
			close(cs.ready)
		}
		// Otherwise a SUBSCRIBE is on its way, and its reply confirms cs.
	}
	cs.subs[sub] = struct{}{}
	sub.lc = lc
	return lc, cs.ready, nil
}

// connLocked returns the live connection, opening one if there is none.
func (f *liveFeed) connLocked() *liveConn {
	if f.conn != nil {
		return f.conn
	}
	// The PubSub connects lazily, on the first SUBSCRIBE, PING or read; a
	// sharded one at once, to the primary of the anchor's slot. Should that
	// fail, the receive loop's first read fails the connection.
	ps := f.client.Subscribe(context.Background())
	if f.anchor != "" {
		ps = f.client.SSubscribe(context.Background(), f.anchor)
	}
	lc := &liveConn{
		ps:       ps,
		channels: map[string]*channelSubs{},
		pending:  map[string]int{},
		toUnsub:  map[string]struct{}{},
		kick:     make(chan struct{}, 1),
		pings:    map[string]chan struct{}{},
		done:     make(chan struct{}),
	}
	f.conn = lc
	f.wg.Add(2)
	go f.receive(lc)
	go f.writeLoop(lc)
	if f.probeEvery > 0 {
		f.wg.Add(1)
		go f.probeLoop(lc)
	}
	return lc
}

// wake tells writeLoop there is something to write; the caller holds
// feed.mu.
func (lc *liveConn) wake() {
	select {
	case lc.kick <- struct{}{}:
	default:
	}
}

// writeLoop is the connection's only writer of SUBSCRIBE and UNSUBSCRIBE.
// It writes without holding feed.mu, so a write waits for no lock and holds
// none: every SUBSCRIBE queued meanwhile goes in the next command. Its
// writes are never cut short by a caller's context, since a half-written
// command would break the connection everyone shares.
func (f *liveFeed) writeLoop(lc *liveConn) {
	defer f.wg.Done()
	unsub := time.NewTimer(f.unsubDelay)
	unsub.Stop()
	armed := false
	for {
		due := false
		select {
		case <-lc.done:
			unsub.Stop()
			return
		case <-lc.kick:
		case <-unsub.C:
			due, armed = true, false
		}
		f.mu.Lock()
		if lc.finished {
			f.mu.Unlock()
			return
		}
		subs := lc.toSub
		lc.toSub = nil
		var unsubs []string
		if due {
			for ch := range lc.toUnsub {
				unsubs = append(unsubs, ch)
			}
			clear(lc.toUnsub)
		} else if len(lc.toUnsub) > 0 && !armed {
			unsub.Reset(f.unsubDelay)
			armed = true
		}
		f.mu.Unlock()
		// A channel in both lists was subscribed and then left, in that
		// order.
		var err error
		if len(subs) > 0 {
			err = f.sub(lc, subs)
		}
		if err == nil && len(unsubs) > 0 {
			err = f.unsub(lc, unsubs)
		}
		if err != nil {
			f.fail(lc, err)
			return
		}
	}
}

// errSlotMoved ends a sharded connection whose slot another primary now
// serves: Redis unsubscribed its channels, so its subscribers resume from
// the streams and later ones subscribe at the new primary.
var errSlotMoved = errors.New("the live channels' slot moved to another primary")

func (f *liveFeed) sub(lc *liveConn, channels []string) error {
	if f.anchor != "" {
		return lc.ps.SSubscribe(context.Background(), channels...)
	}
	return lc.ps.Subscribe(context.Background(), channels...)
}

func (f *liveFeed) unsub(lc *liveConn, channels []string) error {
	if f.anchor != "" {
		return lc.ps.SUnsubscribe(context.Background(), channels...)
	}
	return lc.ps.Unsubscribe(context.Background(), channels...)
}

// receive is the connection's only reader.
func (f *liveFeed) receive(lc *liveConn) {
	defer f.wg.Done()
	for {
		msg, err := lc.ps.Receive(context.Background())
		if err != nil {
			f.fail(lc, err)
			return
		}
		switch m := msg.(type) {
		case *redis.Message:
			f.dispatch(lc, m)
		case *redis.Subscription:
			switch {
			case m.Kind == "subscribe" || m.Kind == "ssubscribe":
				f.confirm(lc, m.Channel)
			case m.Kind == "sunsubscribe" && m.Channel == f.anchor:
				f.fail(lc, errSlotMoved)
				return
			}
		case *redis.Pong:
			f.pong(lc, m.Payload)
		}
	}
}

func (f *liveFeed) dispatch(lc *liveConn, m *redis.Message) {
	e, err := decodePublished(m.Payload)
	if err != nil {
		f.log.Warn().Err(err).Str("channel", m.Channel).Msg("dropping an undecodable live record")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	cs := lc.channels[m.Channel]
	// Before the confirmation the message belongs to an earlier SUBSCRIBE of
	// the channel: it predates every current subscriber.
	if lc.finished || cs == nil || !cs.confirmed {
		return
	}
	for sub := range cs.subs {
		if !sub.q.Push(e) {
			f.removeLocked(sub)
			sub.finish(store.ErrOverflow)
		}
	}
}

func (f *liveFeed) confirm(lc *liveConn, channel string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if lc.pending[channel]--; lc.pending[channel] > 0 {
		return
	}
	delete(lc.pending, channel)
	if cs := lc.channels[channel]; cs != nil && !cs.confirmed {
		cs.confirmed = true
		close(cs.ready)
	}
}

func (f *liveFeed) pong(lc *liveConn, payload string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w, ok := lc.pings[payload]; ok {
		delete(lc.pings, payload)
		close(w)
	}
}

// detach ends sub with err unless it has ended already.
func (f *liveFeed) detach(sub *subscription, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.removeLocked(sub) {
		sub.finish(err)
	}
}

// removeLocked takes sub off its connection, queueing the channel's
// UNSUBSCRIBE when it was the last local subscriber. It reports whether sub
// was still attached.
func (f *liveFeed) removeLocked(sub *subscription) bool {
	lc := sub.lc
	if lc == nil || lc.finished {
		return false
	}
	cs := lc.channels[sub.channel]
	if cs == nil {
		return false
	}
	if _, ok := cs.subs[sub]; !ok {
		return false
	}
	delete(cs.subs, sub)
	if len(cs.subs) == 0 {
		delete(lc.channels, sub.channel)
		lc.toUnsub[sub.channel] = struct{}{}
		lc.wake()
	}
	return true
}

func (f *liveFeed) fail(lc *liveConn, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failLocked(lc, err)
}

// failLocked finishes lc: its subscribers end with store.ErrLiveLost (or
// store.ErrClosed when the Store closes) and later subscribers get a new
// connection.
func (f *liveFeed) failLocked(lc *liveConn, err error) {
	if lc.finished {
		return
	}
	lc.finished = true
	lc.err = err
	if f.conn == lc {
		f.conn = nil
	}
	end := store.ErrLiveLost
	if errors.Is(err, store.ErrClosed) {
		end = store.ErrClosed
	} else if n := len(lc.channels); n > 0 {
		// Debug: while Redis is down every reconnect fails here, and the
		// subscribers' side (the stream hub) logs the outage once.
		f.log.Debug().Err(err).Int("channels", n).Msg("live feed lost; its subscribers resume from the streams")
	}
	for _, cs := range lc.channels {
		for sub := range cs.subs {
			sub.finish(end)
		}
	}
	lc.channels = nil
	close(lc.done)
	_ = lc.ps.Close()
}

// probe sends a PING over the live connection and waits for its answer to
// come back through the receive loop.
func (f *liveFeed) probe(ctx context.Context) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return fmt.Errorf("redisstore: live: %w", store.ErrClosed)
	}
	lc := f.connLocked()
	f.seq++
	payload := "nqd-probe-" + strconv.FormatUint(f.seq, 10)
	answered := make(chan struct{})
	lc.pings[payload] = answered
	if err := lc.ps.Ping(context.Background(), payload); err != nil {
		f.failLocked(lc, err)
		f.mu.Unlock()
		return fmt.Errorf("redisstore: live: %w: %w", store.ErrUnavailable, err)
	}
	f.mu.Unlock()
	select {
	case <-answered:
		return nil
	case <-lc.done:
		return fmt.Errorf("redisstore: live: %w: %w", store.ErrUnavailable, lc.err)
	case <-ctx.Done():
		f.mu.Lock()
		delete(lc.pings, payload)
		f.mu.Unlock()
		return fmt.Errorf("redisstore: live: %w: %w", store.ErrUnavailable, ctx.Err())
	}
}

// probeLoop notices a connection that stopped delivering without an error
// (a silent network partition) and replaces it.
func (f *liveFeed) probeLoop(lc *liveConn) {
	defer f.wg.Done()
	t := time.NewTicker(f.probeEvery)
	defer t.Stop()
	for {
		select {
		case <-lc.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(f.probeEvery, probeTimeout))
		err := f.probeConn(ctx, lc)
		cancel()
		if err != nil {
			f.fail(lc, err)
			return
		}
	}
}

// probeConn is probe pinned to one connection, so the loop never opens a
// new connection for an old one.
func (f *liveFeed) probeConn(ctx context.Context, lc *liveConn) error {
	f.mu.Lock()
	if lc.finished {
		f.mu.Unlock()
		return nil
	}
	f.seq++
	payload := "nqd-probe-" + strconv.FormatUint(f.seq, 10)
	answered := make(chan struct{})
	lc.pings[payload] = answered
	err := lc.ps.Ping(context.Background(), payload)
	f.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case <-answered:
		return nil
	case <-lc.done:
		return nil
	case <-ctx.Done():
		return errNoPong
	}
}

func (f *liveFeed) close() {
	f.mu.Lock()
	f.closed = true
	if f.conn != nil {
		f.failLocked(f.conn, store.ErrClosed)
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// subscription is one local subscriber. q is pushed to and ended only under
// feed.mu, so a push never meets an ended queue.
type subscription struct {
	feed    *liveFeed
	lc      *liveConn
	channel string
	q       *subq.Queue

	mu    sync.Mutex
	ended bool
	err   error
	stop  func() bool // releases the ctx hook
}

// Ready receives after events arrive or the subscription ends.
func (s *subscription) Ready() <-chan struct{} { return s.q.Ready() }

// Next takes the oldest waiting event; see store.Subscription.
func (s *subscription) Next() (e event.Event, ok, live bool) { return s.q.Next() }

// Err says why the subscription ended, or nil while it runs.
func (s *subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the subscription with store.ErrClosed; later calls do nothing.
func (s *subscription) Close() { s.feed.detach(s, store.ErrClosed) }

// watch ends the subscription when ctx ends. The hook is released when the
// subscription ends for any reason, so a long-lived ctx does not collect
// the hooks of subscriptions that ended long ago.
func (s *subscription) watch(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { s.feed.detach(s, ctx.Err()) })
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		stop()
		return
	}
	s.stop = stop
}

// finish records why the subscription ended and ends its queue; the
// caller holds feed.mu.
func (s *subscription) finish(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.ended = true
	s.err = err
	s.q.End()
	if s.stop != nil {
		// stop never waits for the hook, which may be blocked on feed.mu.
		s.stop()
	}
}

// decodePublished reads a record as the append script publishes it
// (scripts/lib.lua): {"id":…, then "prev", the id of the entry before it
// when there is one, then the stored record. The record goes through the
// store's own decoder, as records read from the stream do; a payload that
// does not start as the script writes it is left to the record's JSON
// decoding, and has no Prev.
func decodePublished(payload string) (event.Event, error) {
	id, prev, ok := publishedIDs(payload)
	if !ok {
		var e event.Event
		err := e.UnmarshalJSON([]byte(payload))
		return e, err
	}
	e, err := event.DecodeStored(id, []byte(payload))
	e.Prev = prev
	return e, err
}

// publishedIDs reads the id and prev that open a published record; prev is
// zero when the record has none (a stream's first).
func publishedIDs(payload string) (id, prev event.ID, ok bool) {
	rest, ok := strings.CutPrefix(payload, `{"id":"`)
	if !ok {
		return id, prev, false
	}
	s, rest, ok := strings.Cut(rest, `"`) // ids hold no quote
	if !ok {
		return id, prev, false
	}
	var err error
	if id, err = event.ParseID(s); err != nil {
		return id, prev, false
	}
	if rest, ok = strings.CutPrefix(rest, `,"prev":"`); !ok {
		return id, prev, true
	}
	if s, _, ok = strings.Cut(rest, `"`); !ok {
		return id, prev, false
	}
	prev, err = event.ParseID(s)
	return id, prev, err == nil
}
