package stream

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

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
func (h *Handler) live(ctx context.Context, log *zerolog.Logger, s *sink, cn *conn, q *queue, c store.Context, p plan, last event.ID, expiry time.Time) CloseReason {
	hb := time.NewTimer(h.o.Heartbeat)
	defer hb.Stop()
	var retire <-chan time.Time
	if h.o.MaxLifetime > 0 {
		t := time.NewTimer(h.o.MaxLifetime + rand.N(h.o.LifetimeJitter+1))
		defer t.Stop()
		retire = t.C
	}
	var expire <-chan time.Time
	if !expiry.IsZero() {
		t := time.NewTimer(time.Until(expiry))
		defer t.Stop()
		expire = t.C
	}
	// The connection and the queue tell their writer through callbacks, so
	// that a taken connection idles without a channel; this loop makes them
	// two channels of its own.
	stop, wake := make(chan struct{}), make(chan struct{}, 1)
	cn.whenClosed(func() { close(stop) })
	q.onSignal(func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	var spare []*frame
	var bufs net.Buffers
	for {
		select {
		case <-ctx.Done():
			return CloseClient
		case <-stop:
			return CloseShutdown
		case <-retire:
			return CloseRotate
		case <-expire:
			return CloseExpired
		case <-hb.C:
			s.buf = append(s.buf, ping...)
			if err := s.flushBuf(); err != nil {
				return closeReason(ctx, err)
			}
			hb.Reset(h.o.Heartbeat)
		case <-wake:
			frames, lost, failed := q.take(spare)
			if failed {
				log.Info().Str("context", c.String()).Str("last_id", last.String()).Msg("client too slow; disconnecting")
				return CloseSlow
			}
			if lost {
				var err error
				if last, err = h.pages(ctx, s, c, last, nil); err != nil {
					return closeReason(ctx, err)
				}
			}
			b := batch{bufs: bufs[:0]}
			b.add(frames, p.tail, &last)
			for _, fb := range b.bufs {
				if err := s.write(fb); err != nil {
					return closeReason(ctx, err)
				}
			}
			clear(b.bufs) // kept for the next batch, without the bytes
			spare, bufs = frames, b.bufs
			if err := s.flush(); err != nil {
				return closeReason(ctx, err)
			}
			b.flushed(h.o.Observer)
			hb.Reset(h.o.Heartbeat)
		}
	}
}
