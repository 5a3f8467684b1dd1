package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// backfill sends what the client lacks before the live events and returns
// the id of the last event sent (zero when none), which is the end of the
// stream as its last read found it. The first read that finds the stream's
// end tells st (see starter) before its events are written.
func (h *Handler) backfill(ctx context.Context, s *sink, c store.Context, p plan, st *starter) (event.ID, error) {
	src := h.o.Store
	if p.resume {
		if p.from.IsZero() {
			return h.reset(ctx, s, c, st)
		}
		// Reading from just before the client's event proves that it is
		// still retained: otherwise the replay would be partial.
		evs, err := src.Range(ctx, c, store.RangeQuery{After: before(p.from), Limit: pageSize})
		if err != nil {
			return event.ID{}, err
		}
		if len(evs) == 0 || evs[0].ID != p.from {
			return h.reset(ctx, s, c, st)
		}
		if len(evs) < pageSize {
			st.at(evs[len(evs)-1].ID)
		}
		last, err := s.events(evs[1:], p.from)
		if err != nil || len(evs) < pageSize {
			return last, err
		}
		return h.pages(ctx, s, c, last, st)
	}
	if p.limit == 0 {
		return p.from, nil // the live-only start, taken before the headers
	}
	n := p.limit
	if n <= pageSize {
		want := n
		if p.notice {
			want++ // one more tells whether the maximum cut
		}
		evs, err := src.Range(ctx, c, store.RangeQuery{Reverse: true, Limit: want})
		if err != nil {
			return event.ID{}, err
		}
		st.at(newestOf(evs))
		return h.newest(s, evs, n)
	}
	evs, err := src.Range(ctx, c, store.RangeQuery{Limit: pageSize})
	if err != nil {
		return event.ID{}, err
	}
	if len(evs) < pageSize {
		st.at(lastOf(evs, event.ID{}))
		return s.events(evs, event.ID{})
	}
	info, err := src.Info(ctx, c)
	if err != nil {
		return event.ID{}, err
	}
	st.at(info.LastID)
	if info.Length > int64(n) {
		want := n
		if p.notice {
			want++
		}
		if evs, err = src.Range(ctx, c, store.RangeQuery{Reverse: true, Limit: want}); err != nil {
			return event.ID{}, err
		}
		return h.newest(s, evs, n)
	}
	last, err := s.events(evs, event.ID{})
	if err != nil {
		return last, err
	}
	return h.pages(ctx, s, c, last, st)
}

// newestOf is the first id of evs, read newest first: the stream's end
// (zero when empty).
func newestOf(evs []event.Event) event.ID {
	if len(evs) == 0 {
		return event.ID{}
	}
	return evs[0].ID
}

// lastOf is the last id of evs, read oldest first after last; last when
// evs is empty.
func lastOf(evs []event.Event, last event.ID) event.ID {
	if len(evs) == 0 {
		return last
	}
	return evs[len(evs)-1].ID
}

// newest sends evs, read newest first, oldest first, after the truncation
// notice when they are more than n.
func (h *Handler) newest(s *sink, evs []event.Event, n int) (event.ID, error) {
	if len(evs) > n {
		evs = evs[:n]
		s.buf = appendTruncated(s.buf, n)
	}
	slices.Reverse(evs)
	return s.events(evs, event.ID{})
}

// pages sends every event after last, a page at a time; a short page is
// the stream's end, told to st.
func (h *Handler) pages(ctx context.Context, s *sink, c store.Context, last event.ID, st *starter) (event.ID, error) {
	for {
		evs, err := h.o.Store.Range(ctx, c, store.RangeQuery{After: last, Limit: pageSize})
		if err != nil {
			return last, err
		}
		if len(evs) < pageSize {
			st.at(lastOf(evs, last))
		}
		if last, err = s.events(evs, last); err != nil || len(evs) < pageSize {
			return last, err
		}
	}
}

// reset tells a client whose position is unknown where the stream stands
// and continues from there.
func (h *Handler) reset(ctx context.Context, s *sink, c store.Context, st *starter) (event.ID, error) {
	var state json.RawMessage
	var pos event.ID
	if h.o.State != nil {
		st, at, err := h.o.State(ctx, c)
		if err != nil {
			return event.ID{}, err
		}
		pos = at
		if len(st) > 0 {
			// A data line ends at a newline: the state must be one line.
			var b bytes.Buffer
			if err := json.Compact(&b, st); err != nil {
				return event.ID{}, fmt.Errorf("state of %s: %w", c, err)
			}
			state = b.Bytes()
		}
	} else {
		info, err := h.o.Store.Info(ctx, c)
		if err != nil {
			return event.ID{}, err
		}
		pos = info.LastID
	}
	s.buf = appendReset(s.buf, pos, state)
	s.reset = true
	return h.pages(ctx, s, c, pos, st)
}

// before is the largest id below id (id must not be zero).
func before(id event.ID) event.ID {
	if id.Seq > 0 {
		return event.ID{MS: id.MS, Seq: id.Seq - 1}
	}
	return event.ID{MS: id.MS - 1, Seq: ^uint64(0)}
}
