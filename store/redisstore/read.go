package redisstore

import (
	"bytes"
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// pageSize bounds one XRANGE so a long stream is read in steps that never
// hold Redis for long.
const pageSize = 1000

// Range reads c's stream with XRANGE (XREVRANGE when reversed) in pages.
// Kinds are filtered here, since the kind lives inside the stored record.
// Errors: store.ErrInvalid, store.ErrUnavailable, store.ErrClosed.
func (s *Store) Range(ctx context.Context, c store.Context, q store.RangeQuery) ([]event.Event, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("redisstore: range: %w", store.ErrClosed)
	}
	if !c.Valid() {
		return nil, invalid("range", "context %q", c)
	}
	if q.Limit < 0 {
		return nil, invalid("range", "negative limit %d", q.Limit)
	}
	lo, hi, ok := bounds(q)
	if !ok {
		return []event.Event{}, nil
	}
	key := s.on(c.ID).streamKey(c)
	count := int64(pageSize)
	if q.Limit > 0 && q.Limit < pageSize {
		count = int64(q.Limit)
	}
	out := []event.Event{}
	var dec event.Decoder
	for {
		from, to := rangeStart(lo), rangeEnd(hi)
		if q.Reverse {
			from, to = to, from
		}
		full := false
		got, lastID, err := s.xrange(ctx, key, from, to, count, q.Reverse, func(m streamEntry) {
			if full {
				return
			}
			e, ok := s.decode(&dec, c, m)
			if !ok {
				return
			}
			out = append(out, e)
			full = q.Limit > 0 && len(out) == q.Limit
		})
		if err != nil {
			return nil, mapErr(ctx, "range", err)
		}
		if full || int64(got) < count {
			return out, nil
		}
		// Bounds are inclusive, so the next page starts past the last entry.
		last, err := event.ParseID(lastID)
		if err != nil {
			return nil, fmt.Errorf("redisstore: range: entry id %q: %w", lastID, err)
		}
		if q.Reverse {
			if last.IsZero() {
				return out, nil
			}
			hi = prev(last)
		} else {
			if last == event.MaxID {
				return out, nil
			}
			lo = last.Next()
		}
		if lo.Compare(hi) > 0 {
			return out, nil
		}
	}
}

// bounds turns the query's exclusive lower and inclusive upper bound into one inclusive
// interval; ok is false when it is empty. Working with inclusive ids avoids
// the "(" syntax, which Redis rejects at the extreme ids.
func bounds(q store.RangeQuery) (lo, hi event.ID, ok bool) {
	hi = event.MaxID
	if !q.After.IsZero() {
		if q.After == event.MaxID {
			return lo, hi, false
		}
		lo = q.After.Next()
	}
	if !q.Through.IsZero() {
		hi = q.Through
	}
	return lo, hi, lo.Compare(hi) <= 0
}

// prev is the largest id before id, which must not be zero.
func prev(id event.ID) event.ID {
	if id.Seq == 0 {
		return event.ID{MS: id.MS - 1, Seq: ^uint64(0)}
	}
	return event.ID{MS: id.MS, Seq: id.Seq - 1}
}

// decode reads an entry nqd wrote (field "e") or one the Node module wrote.
// An entry that is neither is skipped with a warning: one foreign entry must
// not make a whole context unreadable.
func (s *Store) decode(dec *event.Decoder, c store.Context, m streamEntry) (event.Event, bool) {
	id, err := event.ParseID(string(m.id))
	if err != nil {
		s.log.Warn().Str("stream", s.on(c.ID).streamKey(c)).Bytes("entry", m.id).Msg("skipping an entry with an unreadable id")
		return event.Event{}, false
	}
	var e event.Event
	if body, ok := m.field("e"); ok {
		// The event keeps parts of its body (data, meta), so each gets a
		// copy of its own rather than a share of the whole reply.
		e, err = dec.Decode(id, bytes.Clone(body))
	} else {
		fields := make(map[string]string, len(m.fields)/2)
		for i := 0; i+1 < len(m.fields); i += 2 {
			fields[string(m.fields[i])] = string(m.fields[i+1])
		}
		e, err = event.DecodeNodeFields(id, c.ID, fields)
	}
	if err != nil {
		s.log.Warn().Err(err).Str("stream", s.on(c.ID).streamKey(c)).Bytes("entry", m.id).Msg("skipping an undecodable entry")
		return event.Event{}, false
	}
	return e, true
}

// Info reads the length and the first and last entries in one MULTI, so the
// three agree. Errors: store.ErrInvalid, store.ErrUnavailable, store.ErrClosed.
func (s *Store) Info(ctx context.Context, c store.Context) (store.StreamInfo, error) {
	if s.closed.Load() {
		return store.StreamInfo{}, fmt.Errorf("redisstore: info: %w", store.ErrClosed)
	}
	if !c.Valid() {
		return store.StreamInfo{}, invalid("info", "context %q", c)
	}
	key := s.on(c.ID).streamKey(c)
	var length *redis.IntCmd
	var first, last *redis.XMessageSliceCmd
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		length = p.XLen(ctx, key)
		first = p.XRangeN(ctx, key, "-", "+", 1)
		last = p.XRevRangeN(ctx, key, "+", "-", 1)
		return nil
	})
	if err != nil {
		return store.StreamInfo{}, mapErr(ctx, "info", err)
	}
	info := store.StreamInfo{Length: length.Val()}
	if f := first.Val(); len(f) == 1 {
		if info.FirstID, err = event.ParseID(f[0].ID); err != nil {
			return store.StreamInfo{}, fmt.Errorf("redisstore: info: entry id %q: %w", f[0].ID, err)
		}
	}
	if l := last.Val(); len(l) == 1 {
		if info.LastID, err = event.ParseID(l[0].ID); err != nil {
			return store.StreamInfo{}, fmt.Errorf("redisstore: info: entry id %q: %w", l[0].ID, err)
		}
	}
	return info, nil
}
