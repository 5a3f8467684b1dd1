package handlers

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/internal/outage"
)

// watch tells the sockets of an instance when something they show
// changes: the flows' stats, the queues' counts. While any socket listens it
// reads the values (each one by its name) every interval, and wakes the
// listeners when they differ from the last read. What it reads is shared by
// every instance (the run index, the queues), so each instance's sockets see
// every change, made anywhere, within an interval, over every store; and no
// write pays for a notification nobody may be listening to.
type watch[V comparable] struct {
	read     func(ctx context.Context) (map[string]V, error)
	interval time.Duration
	failing  *outage.Log

	mu     sync.Mutex
	subs   map[*listener]struct{}
	latest map[string]V
	stop   context.CancelFunc // nil while no one listens
	poke   chan struct{}
}

// listener is one socket's subscription to a watch.
type listener struct {
	wake   chan struct{} // a read is there to compare with
	primed bool          // a read has been there since it joined
}

// newWatch builds a watch that reads with read each interval; what names
// its failures in the log.
func newWatch[V comparable](what string, read func(context.Context) (map[string]V, error), interval time.Duration, log zerolog.Logger) *watch[V] {
	return &watch[V]{read: read, interval: interval, failing: outage.New(log, what),
		subs: map[*listener]struct{}{}}
}

func (w *watch[V]) join() *listener {
	l := &listener{wake: make(chan struct{}, 1)}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.subs[l] = struct{}{}
	if w.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		w.stop, w.poke = cancel, make(chan struct{}, 1)
		go w.run(ctx, w.poke)
	}
	select {
	case w.poke <- struct{}{}: // a new listener gets its first read at once
	default:
	}
	return l
}

func (w *watch[V]) leave(l *listener) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.subs, l)
	if len(w.subs) == 0 && w.stop != nil {
		w.stop()
		w.stop, w.latest = nil, nil
	}
}

// run reads the stats each interval (and when poked) until no one listens.
func (w *watch[V]) run(ctx context.Context, poke <-chan struct{}) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-poke:
		}
		rctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
		m, err := w.read(rctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				w.failing.Failed(err)
			}
			continue
		}
		w.failing.Succeeded()
		w.mu.Lock()
		if ctx.Err() == nil {
			changed := !maps.Equal(m, w.latest)
			w.latest = m
			for l := range w.subs {
				if changed || !l.primed {
					l.primed = true
					select {
					case l.wake <- struct{}{}:
					default:
					}
				}
			}
		}
		w.mu.Unlock()
	}
}

func (w *watch[V]) snapshot() map[string]V {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest
}

// storeCallTimeout bounds one read a watch makes.
const storeCallTimeout = 10 * time.Second

// follow sends each value with send (initial set) once the first read is
// there, then stats.subscribed, then each value that changes (initial
// unset), until the subscription is stopped: the stats subscriptions of
// the flows and triggers sockets.
func (w *watch[V]) follow(sc *socketClient, send func(name string, v V, initial bool) error) *subscription {
	var sent map[string]V
	return w.each(sc, func(snap map[string]V) bool {
		for _, name := range slices.Sorted(maps.Keys(snap)) {
			v := snap[name]
			if old, ok := sent[name]; ok && old == v {
				continue
			}
			if send(name, v, sent == nil) != nil {
				return false
			}
		}
		if sent == nil {
			sc.send("stats.subscribed")
		}
		sent = snap
		return true
	})
}

// each calls got, on a goroutine of its own, with every snapshot the watch
// reads while the socket listens, until the subscription is stopped or got
// returns false.
func (w *watch[V]) each(sc *socketClient, got func(snap map[string]V) bool) *subscription {
	ctx, cancel := context.WithCancel(sc.conn.Context())
	s := &subscription{cancel: cancel, done: make(chan struct{})}
	l := w.join()
	go func() {
		defer close(s.done)
		defer w.leave(l)
		for {
			select {
			case <-ctx.Done():
				return
			case <-l.wake:
			}
			if snap := w.snapshot(); snap != nil && !got(snap) {
				return
			}
		}
	}()
	return s
}
