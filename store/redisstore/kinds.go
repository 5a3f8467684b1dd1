package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// kindKey is the kind index of kind, a stream append.lua writes beside each
// appended event. The engine: prefix keeps it apart from context streams,
// whose ids hold no colon.
func (sh *shard) kindKey(kind string) string { return sh.prefix + ":engine:kind:" + kind }

// watchedKey is the set of kinds append.lua indexes; other kinds cost it
// one SISMEMBER per batch and kind.
func (sh *shard) watchedKey() string { return sh.prefix + ":engine:kinds:watched" }

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
	// Each shard's appends read their shard's copy of the set.
	for _, sh := range s.shards {
		if err := s.client.SAdd(ctx, sh.watchedKey(), members...).Err(); err != nil {
			return mapErr(ctx, "watch kinds", err)
		}
	}
	return nil
}

//go:embed scripts/consume.lua
var consumeLua string

var consumeScript = redis.NewScript(consumeLua)

// consumedKey marks an entry of the kind index consumed; run_update.lua
// sets it, expiring with the window.
func (sh *shard) consumedKey(k store.KindRef) string {
	return sh.prefix + ":engine:consumed:" + k.Kind + ":" + formatID(k.Seq)
}

func (s *Store) kindWindow() time.Duration {
	if s.opts.KindWindow > 0 {
		return s.opts.KindWindow
	}
	return store.DefaultKindWindow
}

// KindEvents reads the kind index. With several shards each shard keeps
// the entries of its own appends, and an entry's Seq is its position in its
// shard's index with the shard folded into the low part (kindSeq), so that
// one cursor orders the entries of every shard: a read merges the entries
// after the cursor of each. Errors: store.ErrInvalid, store.ErrUnavailable,
// store.ErrClosed.
func (s *Store) KindEvents(ctx context.Context, kind string, after event.ID, limit int) ([]store.KindEntry, error) {
	if err := s.checkOpen("kind events"); err != nil {
		return nil, err
	}
	if !event.ValidKind(kind) || limit < 1 || limit > 1000 {
		return nil, invalid("kind events", "kind %q, limit %d", kind, limit)
	}
	n := len(s.shards)
	out := make([]store.KindEntry, 0, limit)
	var taken []*redis.IntCmd
	pipe := s.client.Pipeline()
	for i, sh := range s.shards {
		msgs, err := s.client.XRangeN(ctx, sh.kindKey(kind), kindStart(after, i, n), "+", int64(limit)).Result()
		if err != nil {
			return nil, mapErr(ctx, "kind events", err)
		}
		for _, m := range msgs {
			en, err := decodeKindEntry(m)
			if err != nil {
				return nil, err
			}
			taken = append(taken, pipe.Exists(ctx, sh.consumedKey(store.KindRef{Kind: kind, Seq: en.Seq})))
			en.Seq = kindSeq(en.Seq, i, n)
			out = append(out, en)
		}
	}
	if len(out) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, mapErr(ctx, "kind events", err)
		}
	}
	for i := range out {
		out[i].Consumed = taken[i].Val() == 1
	}
	if n > 1 {
		slices.SortFunc(out, func(a, b store.KindEntry) int { return a.Seq.Compare(b.Seq) })
		out = out[:min(limit, len(out))]
	}
	return out, nil
}

// kindSeq is the Seq of the entry at id of shard i of n: id's sequence
// times n plus i, which keeps the order of one shard's entries and puts
// those of the same millisecond on several shards in a fixed order. With
// one shard it is id.
func kindSeq(id event.ID, i, n int) event.ID {
	return event.ID{MS: id.MS, Seq: id.Seq*uint64(n) + uint64(i)}
}

// kindEntryOf undoes kindSeq: the shard of seq, and the entry's id there.
func kindEntryOf(seq event.ID, n int) (int, event.ID) {
	return int(seq.Seq % uint64(n)), event.ID{MS: seq.MS, Seq: seq.Seq / uint64(n)}
}

// kindStart is where shard i of n is read from for the entries whose Seq
// (kindSeq) is after after: an XRANGE start, inclusive.
func kindStart(after event.ID, i, n int) string {
	if after.IsZero() {
		return "-"
	}
	if n == 1 {
		return "(" + formatID(after)
	}
	from := uint64(0)
	if after.Seq >= uint64(i) {
		from = (after.Seq-uint64(i))/uint64(n) + 1
	}
	return strconv.FormatUint(after.MS, 10) + "-" + strconv.FormatUint(from, 10)
}

// consume reserves the entries of refs for owner (a run, <flow>:<run>) on
// their own shards, before a run update that consumes them writes on its
// run's (scripts/consume.lua): of several runs on any shards, one reserves
// an entry. It refuses with store.ErrConflict when another owner holds one,
// releasing what it reserved; release gives the reservations back, for an
// update that then did not happen. A reservation left by an update that
// never came (the process ended between the two) keeps the entry from other
// runs until the window ends.
func (s *Store) consume(ctx context.Context, refs []store.KindRef, owner string) (release func(), err error) {
	n := len(s.shards)
	type reserved struct {
		sh  *shard
		key string
	}
	var held []reserved
	release = func() {
		for _, r := range held {
			_ = r.sh.pipe.call(context.WithoutCancel(ctx), consumeScript, []string{r.key}, []any{owner, 0, 1}).Err()
		}
	}
	for _, ref := range refs {
		i, id := kindEntryOf(ref.Seq, n)
		sh := s.shards[i]
		k := sh.consumedKey(store.KindRef{Kind: ref.Kind, Seq: id})
		code, err := sh.pipe.call(ctx, consumeScript, []string{k}, []any{owner, s.kindWindow().Milliseconds(), 0}).Int()
		if err == nil && code != 0 {
			err = fmt.Errorf("redisstore: event %s of kind %s: %w: already consumed", ref.Seq, ref.Kind, store.ErrConflict)
		}
		if err != nil {
			release()
			return nil, mapErr(ctx, "consume", err)
		}
		held = append(held, reserved{sh, k})
	}
	return release, nil
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
