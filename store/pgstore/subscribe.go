package pgstore

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/internal/fanout"
)

// feed holds the store's one listening connection and its subscriptions. A
// notification names a context and its newest id; each subscription of that
// context then reads what it has not seen from the table. A dropped listener
// is reconnected, and every subscription reads again once it listens, which
// repairs whatever the outage hid.
type feed struct {
	s    *Store
	cfg  *pgx.ConnConfig
	subs *fanout.Set

	cancel context.CancelFunc
	done   chan struct{}
	// listening is whether the listener connection is up.
	listening atomic.Bool
}

// retryDelay is how long the listener, or a subscription whose read failed,
// waits before trying again.
const retryDelay = 200 * time.Millisecond

func newFeed(s *Store, cfg *pgx.ConnConfig) *feed {
	return &feed{s: s, cfg: cfg, subs: fanout.NewSet(s.log, errClosed), done: make(chan struct{})}
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
			f.subs.Wake(ck)
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
		f.subs.Wake("") // what the outage hid
	}
}

// stop ends every subscription with ErrClosed and the listener.
func (f *feed) stop() {
	f.subs.Close()
	if f.cancel != nil {
		f.cancel()
		<-f.done
	}
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
	// Registered before the head is read: an append committed after the
	// read notifies this subscription, one committed before is not its.
	sub, err := s.feed.subs.Add(contextKey(c), buffer)
	if err != nil {
		return nil, err
	}
	var ms, seq int64
	err = s.pool.QueryRow(ctx, sqlStreamHead, sub.Key()).Scan(&ms, &seq)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		err = dbErr(err)
		sub.End(err)
		return nil, err
	}
	sub.Watch(ctx)
	go s.feed.run(sub, event.ID{MS: uint64(ms), Seq: uint64(seq)})
	return sub, nil
}

// run reads and delivers sub's new events, after last, each time it is
// woken.
func (f *feed) run(sub *fanout.Sub, last event.ID) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-sub.Done()
		cancel()
	}()
	for {
		select {
		case <-sub.Done():
			return
		case <-sub.Woken():
		}
		// One more than fits: reading it means the subscriber is behind.
		limit := sub.Bound() + 1
		evs, err := rangeQuery(ctx, f.s.pool, sqlRange, sub.Key(), last.Next(), event.MaxID, limit)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.s.log.Debug().Err(err).Str("context", sub.Key()).Msg("pgstore: subscription read failed; retrying")
			select {
			case <-sub.Done():
				return
			case <-time.After(retryDelay):
			}
			sub.Wake()
			continue
		}
		for _, e := range evs {
			if !sub.Send(e) {
				return
			}
			last = e.ID
		}
		if len(evs) == limit {
			sub.Wake()
		}
	}
}
