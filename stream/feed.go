package stream

import (
	"context"
	"errors"
	"sync"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// ErrSlow ends a Feed whose reader fell behind by more than the queue bound
// (Options.QueueEvents, QueueBytes), the bound a slow SSE client is cut at.
var ErrSlow = errors.New("stream: the reader fell behind")

// Feed is one context followed by a reader that is not an SSE connection (a
// WebSocket subscription): the whole stream from its start, then every event
// appended after it, in order, each exactly once. It shares the Hub's live
// feed and its gap repair with the SSE connections of the same context.
//
// History must be read before Next; a Feed is used by one goroutine, except
// Wake and Close.
type Feed struct {
	h    *Handler
	c    store.Context
	t    *topic
	q    *queue
	st   *starter
	last event.ID // the newest event handed to the reader

	wake  chan struct{}
	spare []*frame
	once  sync.Once
}

// Follow attaches to c's live feed. Every event appended after Follow
// returns reaches the Feed; call Close when done.
func (h *Handler) Follow(ctx context.Context, c store.Context) (*Feed, error) {
	q := newQueue(false, h.o.QueueEvents, h.o.QueueBytes)
	t, st, err := h.hub.join(ctx, c, q)
	if err != nil {
		return nil, unavailable(ctx.Err(), "subscribe to", c, err)
	}
	f := &Feed{h: h, c: c, t: t, q: q, st: st, wake: make(chan struct{}, 1)}
	q.onSignal(func() {
		select {
		case f.wake <- struct{}{}:
		default:
		}
	})
	return f, nil
}

// History hands the stream's events from its start to page, a page at a
// time, oldest first, up to the stream's end as the last read finds it;
// page returning an error stops it. Events that arrive live meanwhile are
// held (or, past the queue bound, read again from the stream) for Next.
func (f *Feed) History(ctx context.Context, page func([]event.Event) error) error {
	defer f.st.done()
	for {
		evs, err := f.h.o.Store.Range(ctx, f.c, store.RangeQuery{After: f.last, Limit: pageSize})
		if err != nil {
			return unavailable(ctx.Err(), "read", f.c, err)
		}
		if len(evs) < pageSize {
			f.st.at(lastOf(evs, f.last))
		}
		if len(evs) > 0 {
			f.last = evs[len(evs)-1].ID
			if err := page(evs); err != nil {
				return err
			}
		}
		if len(evs) < pageSize {
			// From now on the reader only takes what is live: a queue
			// that overflows is a reader that does not keep up.
			f.q.harden()
			return nil
		}
	}
}

// Wake receives when Next may have events.
func (f *Feed) Wake() <-chan struct{} { return f.wake }

// Next takes the live events that arrived since the last call, newer than
// every event handed out before (none may be there). It fails with ErrSlow
// once the reader fell behind, or with the store's error when a hole the
// queue left cannot be read.
func (f *Feed) Next(ctx context.Context) ([]event.Event, error) {
	frames, lost, failed := f.q.take(f.spare)
	if failed {
		return nil, ErrSlow
	}
	var evs []event.Event
	if lost {
		// Frames were forgotten while the history was read: the stream
		// has them.
		for {
			page, err := f.h.o.Store.Range(ctx, f.c, store.RangeQuery{After: f.last, Limit: pageSize})
			if err != nil {
				return nil, unavailable(ctx.Err(), "read", f.c, err)
			}
			if len(page) > 0 {
				f.last = page[len(page)-1].ID
			}
			evs = append(evs, page...)
			if len(page) < pageSize {
				break
			}
		}
	}
	for _, fr := range frames {
		if fr.id.Compare(f.last) <= 0 {
			continue
		}
		f.last = fr.id
		evs = append(evs, fr.ev)
	}
	f.spare = frames
	return evs, nil
}

// Close detaches the Feed from the live feed. It may be called more than
// once, from any goroutine.
func (f *Feed) Close() {
	f.once.Do(func() {
		f.st.done()
		f.h.hub.leave(f.t, f.q)
	})
}
