package pgstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// feed holds the store's one listening connection and its subscriptions. A
// notification names a context and its newest id; each subscription of that
// context then reads what it has not seen from the table. A dropped listener
// is reconnected, and every subscription reads again once it listens, which
// repairs whatever the outage hid.
type feed struct {
	s   *Store
	cfg *pgx.ConnConfig

	mu     sync.Mutex
	subs   map[string]map[*subscription]struct{}
	closed bool

	cancel context.CancelFunc
	done   chan struct{}
	// listening is whether the listener connection is up.
	listening atomic.Bool
}

// retryDelay is how long the listener, or a subscription whose read failed,
// waits before trying again.
const retryDelay = 200 * time.Millisecond

func newFeed(s *Store, cfg *pgx.ConnConfig) *feed {
	return &feed{s: s, cfg: cfg, subs: make(map[string]map[*subscription]struct{}), done: make(chan struct{})}
}

// start connects the listener; the store does not open without one, so a
// bad URL or an unreachable server fails Open.
func (f *feed) start(ctx context.Context) error {
	conn, err := f.listen(ctx)
	if err != nil {
		return err
	}
	f.listening.Store(true)
	loopCtx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go f.loop(loopCtx, conn)
	return nil
}

func (f *feed) listen(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, f.cfg)
	if err != nil {
		return nil, dbErr(err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{f.s.channel}.Sanitize()); err != nil {
		_ = conn.Close(context.Background())
		return nil, dbErr(err)
	}
	return conn, nil
}

func (f *feed) loop(ctx context.Context, conn *pgx.Conn) {
	defer close(f.done)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err == nil {
			ck, _, _ := strings.Cut(n.Payload, " ")
			f.kick(ck)
			continue
		}
		f.listening.Store(false)
		_ = conn.Close(context.Background())
		if ctx.Err() != nil {
			return
		}
		f.s.log.Warn().Err(err).Msg("pgstore: listener lost; reconnecting")
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(retryDelay):
			}
			if conn, err = f.listen(ctx); err == nil {
				break
			}
		}
		f.listening.Store(true)
		f.s.log.Info().Msg("pgstore: listener reconnected")
		f.kick("")
	}
}

// kick wakes the subscriptions of context ck, or all of them when ck is "".
func (f *feed) kick(ck string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for key, set := range f.subs {
		if ck != "" && key != ck {
			continue
		}
		for sub := range set {
			sub.wake()
		}
	}
}

// stop ends every subscription with ErrClosed and the listener.
func (f *feed) stop() {
	f.mu.Lock()
	f.closed = true
	var all []*subscription
	for _, set := range f.subs {
		for sub := range set {
			all = append(all, sub)
		}
	}
	f.mu.Unlock()
	for _, sub := range all {
		sub.end(errClosed)
	}
	if f.cancel != nil {
		f.cancel()
		<-f.done
	}
}

func (f *feed) remove(sub *subscription) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if set := f.subs[sub.ck]; set != nil {
		delete(set, sub)
		if len(set) == 0 {
			delete(f.subs, sub.ck)
		}
	}
}

// subscription is a bounded feed of one context's events, read from the
// table after the last id it delivered.
type subscription struct {
	f      *feed
	ck     string
	ch     chan event.Event
	wakeCh chan struct{}
	quit   chan struct{}

	mu   sync.Mutex
	err  error // set once, when the subscription ends
	stop func() bool
	last event.ID // touched only by run
}

// Subscribe delivers c's events appended after it returns. buffer <= 0 uses
// Options.SubscriptionBuffer. Errors: ErrInvalid, ErrClosed, ErrUnavailable,
// or ctx's error.
func (s *Store) Subscribe(ctx context.Context, c store.Context, buffer int) (store.Subscription, error) {
	if err := checkContext(c); err != nil {
		return nil, err
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	if buffer <= 0 {
		buffer = s.opts.SubscriptionBuffer
	}
	sub := &subscription{
		f: s.feed, ck: contextKey(c), ch: make(chan event.Event, buffer),
		wakeCh: make(chan struct{}, 1), quit: make(chan struct{}),
	}
	// Registered before the head is read: an append committed after the
	// read notifies this subscription, one committed before is not its.
	f := s.feed
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, errClosed
	}
	set := f.subs[sub.ck]
	if set == nil {
		set = make(map[*subscription]struct{})
		f.subs[sub.ck] = set
	}
	set[sub] = struct{}{}
	f.mu.Unlock()

	var ms, seq int64
	err := s.pool.QueryRow(ctx, sqlStreamHead, sub.ck).Scan(&ms, &seq)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		f.remove(sub)
		return nil, dbErr(err)
	}
	sub.last = event.ID{MS: uint64(ms), Seq: uint64(seq)}

	// Held so that a context already done cannot end the subscription
	// before stop is recorded.
	sub.mu.Lock()
	stop := context.AfterFunc(ctx, func() { sub.end(ctx.Err()) })
	sub.stop = stop
	ended := sub.err != nil
	sub.mu.Unlock()
	if ended {
		stop()
	}
	go sub.run()
	return sub, nil
}

func (sub *subscription) wake() {
	select {
	case sub.wakeCh <- struct{}{}:
	default:
	}
}

// run reads and delivers the context's new events each time it is woken.
func (sub *subscription) run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-sub.quit
		cancel()
	}()
	for {
		select {
		case <-sub.quit:
			return
		case <-sub.wakeCh:
		}
		// One more than fits: reading it means the subscriber is behind.
		limit := cap(sub.ch) + 1
		evs, err := rangeQuery(ctx, sub.f.s.pool, sqlRange, sub.ck, sub.last.Next(), event.MaxID, limit)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			sub.f.s.log.Debug().Err(err).Str("context", sub.ck).Msg("pgstore: subscription read failed; retrying")
			select {
			case <-sub.quit:
				return
			case <-time.After(retryDelay):
			}
			sub.wake()
			continue
		}
		for _, e := range evs {
			if !sub.send(e) {
				return
			}
			sub.last = e.ID
		}
		if len(evs) == limit {
			sub.wake()
		}
	}
}

// send reports whether e was queued; false means the subscription has ended.
func (sub *subscription) send(e event.Event) bool {
	sub.mu.Lock()
	if sub.err != nil {
		sub.mu.Unlock()
		return false
	}
	select {
	case sub.ch <- e:
		sub.mu.Unlock()
		return true
	default:
	}
	sub.mu.Unlock()
	sub.f.s.log.Debug().Str("context", sub.ck).Int("buffer", cap(sub.ch)).Msg("subscriber overflow")
	sub.end(store.ErrOverflow)
	return false
}

// end closes the channel and records why; only the first call counts.
func (sub *subscription) end(err error) {
	sub.mu.Lock()
	if sub.err != nil {
		sub.mu.Unlock()
		return
	}
	sub.err = err
	close(sub.ch)
	close(sub.quit)
	stop := sub.stop
	sub.mu.Unlock()
	if stop != nil {
		stop()
	}
	sub.f.remove(sub)
}

// C returns the channel of events; it is closed when the subscription ends.
func (sub *subscription) C() <-chan event.Event { return sub.ch }

// Err says why the subscription ended, or nil while it is live.
func (sub *subscription) Err() error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.err
}

// Close ends the subscription with ErrClosed.
func (sub *subscription) Close() { sub.end(errClosed) }
