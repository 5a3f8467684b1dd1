package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// kindKey is the kind index of kind, a stream append.lua writes beside each
// appended event. The engine: prefix keeps it apart from context streams,
// whose ids hold no colon.
func (s *Store) kindKey(kind string) string { return s.prefix + ":engine:kind:" + kind }

// watchedKey is the set of kinds append.lua indexes; other kinds cost it
// one SISMEMBER per batch and kind.
func (s *Store) watchedKey() string { return s.prefix + ":engine:kinds:watched" }

// WatchKinds adds kinds to the watched set, for every instance on this
// Redis. Errors: store.ErrInvalid, store.ErrUnavailable, store.ErrClosed.
func (s *Store) WatchKinds(ctx context.Context, kinds ...string) error {
	if err := s.checkOpen("watch kinds"); err != nil {
		return err
	}
	if len(kinds) == 0 {
		return nil
	}
	members := make([]any, len(kinds))
	for i, k := range kinds {
		if !event.ValidKind(k) {
			return invalid("watch kinds", "kind %q", k)
		}
		members[i] = k
	}
	if err := s.client.SAdd(ctx, s.watchedKey(), members...).Err(); err != nil {
		return mapErr(ctx, "watch kinds", err)
	}
	return nil
}

// consumedKey marks an entry of the kind index consumed; run_update.lua
// sets it, expiring with the window.
func (s *Store) consumedKey(k store.KindRef) string {
	return s.prefix + ":engine:consumed:" + k.Kind + ":" + formatID(k.Seq)
}

func (s *Store) kindWindow() time.Duration {
	if s.opts.KindWindow > 0 {
		return s.opts.KindWindow
	}
	return store.DefaultKindWindow
}

// KindEvents reads the kind index. Errors: store.ErrInvalid,
// store.ErrUnavailable, store.ErrClosed.
func (s *Store) KindEvents(ctx context.Context, kind string, after event.ID, limit int) ([]store.KindEntry, error) {
	if err := s.checkOpen("kind events"); err != nil {
		return nil, err
	}
	if !event.ValidKind(kind) || limit < 1 || limit > 1000 {
		return nil, invalid("kind events", "kind %q, limit %d", kind, limit)
	}
	start := "-"
	if !after.IsZero() {
		start = "(" + formatID(after)
	}
	msgs, err := s.client.XRangeN(ctx, s.kindKey(kind), start, "+", int64(limit)).Result()
	if err != nil {
		return nil, mapErr(ctx, "kind events", err)
	}
	out := make([]store.KindEntry, 0, len(msgs))
	taken := make([]*redis.IntCmd, len(msgs))
	pipe := s.client.Pipeline()
	for i, m := range msgs {
		en, err := decodeKindEntry(m)
		if err != nil {
			return nil, err
		}
		out = append(out, en)
		taken[i] = pipe.Exists(ctx, s.consumedKey(store.KindRef{Kind: kind, Seq: en.Seq}))
	}
	if len(msgs) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, mapErr(ctx, "kind events", err)
		}
	}
	for i := range out {
		out[i].Consumed = taken[i].Val() == 1
	}
	return out, nil
}

func decodeKindEntry(m redis.XMessage) (store.KindEntry, error) {
	seq, err := parseID(m.ID)
	if err != nil {
		return store.KindEntry{}, err
	}
	str := func(k string) string { v, _ := m.Values[k].(string); return v }
	id, err := parseID(str("s"))
	if err != nil {
		return store.KindEntry{}, err
	}
	ev, err := event.DecodeStored(id, []byte(str("e")))
	if err != nil {
		return store.KindEntry{}, fmt.Errorf("redisstore: kind entry %s: %w", m.ID, err)
	}
	return store.KindEntry{Seq: seq, Context: store.Context{Type: str("t"), ID: str("c")}, Event: ev}, nil
}
