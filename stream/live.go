package stream

import (
	"context"
	"errors"
	"math/rand/v2"
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
	var spare []*frame
	stop, wake := cn.done(), q.wakeup()
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
