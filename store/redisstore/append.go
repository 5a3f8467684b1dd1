package redisstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

//go:embed scripts/append.lua
var appendLua string

// Append stores evs atomically with their publication and index maintenance
// (see scripts/append.lua). Errors: store.ErrInvalid, store.ErrUnavailable
// and store.ErrClosed (nothing was stored), store.ErrKeyReused, or
// store.ErrOutcomeUnknown.
//
// Every append carries an idempotency key: the caller's, or a token of its
// own remembered for tokenWindow. When the connection breaks after the script
// was sent, the append is sent again with the same key until ctx ends: the
// script then either finds its record (the first one ran) or runs now, so
// the caller learns the true outcome and the batch is stored once.
func (s *Store) Append(ctx context.Context, c store.Context, evs []event.Event, opts store.AppendOptions) (store.AppendResult, error) {
	if s.closed.Load() {
		return store.AppendResult{}, fmt.Errorf("redisstore: append: %w", store.ErrClosed)
	}
	if !c.Valid() {
		return store.AppendResult{}, invalid("append", "context %q", c)
	}
	if len(evs) == 0 {
		return store.AppendResult{}, invalid("append", "empty batch")
	}
	if len(opts.IdempotencyKey) > maxIdempotencyKey {
		return store.AppendResult{}, invalid("append", "idempotency key longer than %d bytes", maxIdempotencyKey)
	}
	if opts.Held != nil && !event.ValidName(opts.Held.Queue) {
		return store.AppendResult{}, invalid("append", "queue %q", opts.Held.Queue)
	}

	sh := s.on(c.ID)
	stream := sh.streamKey(c)
	keys := []string{stream, sh.indexKey(store.Index{Type: c.Type}), sh.watchedKey()}
	// keyAt returns the KEYS position (1-based, as Lua counts) of k, adding it
	// once: a batch of starts of one flow needs its index key only once.
	keyAt := func(k string) int {
		for i, have := range keys {
			if have == k {
				return i + 1
			}
		}
		keys = append(keys, k)
		return len(keys)
	}
	key, window, same, token := opts.IdempotencyKey, s.opts.IdempotencyWindow, opts.SameRequest, false
	if key == "" {
		key, window, same, token = newToken(), tokenWindow, true, true
	}
	idem := keyAt(sh.idemKey(c, key))

	raw, err := store.EncodeEvents(evs)
	if err != nil {
		return store.AppendResult{}, fmt.Errorf("redisstore: append: %w", err)
	}
	bodies := make([]any, len(evs))
	joins := make([]any, len(evs))
	for i, e := range evs {
		bodies[i] = raw[i]
		joins[i] = 0
		if ix, ok := store.JoinedIndex(e); ok {
			joins[i] = keyAt(sh.indexKey(ix))
		}
	}

	kinds := make([]any, len(evs))
	for i, e := range evs {
		kinds[i] = keyAt(sh.kindKey(e.Kind))
	}

	fp := store.Fingerprint(raw)
	sameArg := 0
	if same {
		sameArg = 1
	}
	args := make([]any, 0, 14+3*len(evs))
	args = append(args, sh.channel(c), c.ID, s.maxLen(c.Type), idem, window.Milliseconds(), len(evs))
	args = append(args, bodies...)
	args = append(args, joins...)
	args = append(args, s.kindWindow().Milliseconds(), c.Type, len(sh.kindKey("")))
	args = append(args, kinds...)
	args = append(args, hex.EncodeToString(fp[:]), sameArg)
	if h := opts.Held; h != nil {
		args = append(args, keyAt(sh.jobsKey(h.Queue)), h.ID, h.Lease)
	} else {
		args = append(args, 0, "", "")
	}
	reply, err := s.write(ctx, sh, "append", s.scripts.append, keys, args)
	if err != nil {
		return store.AppendResult{}, err
	}
	res, err := s.appendResult(c, evs, reply)
	if token {
		// The token's record answering means this very append ran.
		res.Replayed = false
	}
	return res, err
}

// tokenWindow is how long the record of an append without a caller's key is
// kept: long enough to resolve a lost reply within any request deadline, and
// for a command delayed on the network to find the record, short enough that
// the records of a busy server stay few.
const tokenWindow = time.Minute

// maxResolve bounds how long a lost reply is resolved when ctx has no
// deadline of its own.
const maxResolve = 10 * time.Second

// idemKey is where an idempotency key of c keeps the ids it stored: a
// digest, so that no client string reaches a key name.
func (sh *shard) idemKey(c store.Context, key string) string {
	sum := sha256.Sum256([]byte(key))
	return sh.streamKey(c) + ":idem:" + hex.EncodeToString(sum[:])
}

// newToken is the idempotency key of an append whose caller gave none. It
// starts with a byte no client key may hold, so the two never meet.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "\x00" + hex.EncodeToString(b[:])
}

// write calls script, a write on sh, and when its reply was lost sends it
// again (resend). The error is mapped for the caller: a write that may have run
// but whose outcome could not be learnt is store.ErrOutcomeUnknown.
func (s *Store) write(ctx context.Context, sh *shard, op string, script *redis.Script, keys []string, args []any) ([]any, error) {
	reply, err := sh.pipe.run(ctx, script, keys, args)
	if err != nil && mayHaveRun(err) {
		reply, err = s.resend(ctx, sh, op, script, keys, args, err)
	}
	if err != nil && !errors.Is(err, store.ErrOutcomeUnknown) {
		err = mapErr(ctx, op, err)
	}
	sh.note(err)
	return reply, err
}

// resend sends a write whose reply was lost again, until it is answered or
// ctx (at most maxResolve) ends; then the outcome is unknown. The reply lost
// on a primary that failed over, or a replica's acknowledgement that did not
// come (Options.WaitReplicas), so becomes the true answer. It is only for a
// script whose second run answers as its first did and writes nothing more:
// an append under its idempotency key, a claim under its lease (claim_jobs'
// record), a run update under its record, a heartbeat (which writes the same
// lease end again).
func (s *Store) resend(ctx context.Context, sh *shard, op string, script *redis.Script, keys []string, args []any, cause error) ([]any, error) {
	ctx, cancel := context.WithTimeout(ctx, maxResolve)
	defer cancel()
	s.log.Warn().Err(cause).Str("op", op).Msg("a write's outcome is not known yet; sending it again, which answers as the first run did")
	wait := 50 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("redisstore: %s: %w: %w", op, store.ErrOutcomeUnknown, cause)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
		// Through the pipeline, so that with Options.WaitReplicas the
		// answer waits for the replicas as the first call did.
		reply, err := sh.pipe.run(ctx, script, keys, args)
		var rerr redis.Error
		switch {
		case err == nil:
			return reply, nil
		case errors.As(err, &rerr) && !isServerRefusal(err):
			return nil, err // the script itself failed: not a connection matter
		}
	}
}

// mayHaveRun reports whether a failed script call may have reached Redis and
// run: anything but a call never sent, a failed dial, an exhausted or closed
// pool, or a reply (a reply, even an error, means Redis answered this call).
func mayHaveRun(err error) bool {
	var (
		opErr *net.OpError
		rerr  redis.Error
	)
	switch {
	case errors.Is(err, errNotSent), errors.As(err, &opErr) && opErr.Op == "dial",
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrClosed),
		errors.As(err, &rerr):
		return false
	}
	return true
}

// appendResult reads the script's reply: {0, id...} for a new append, or
// {1, id, body...} for a replay.
func (s *Store) appendResult(c store.Context, evs []event.Event, reply []any) (store.AppendResult, error) {
	if len(reply) == 0 {
		return store.AppendResult{}, fmt.Errorf("redisstore: append: empty reply")
	}
	switch outcome, _ := reply[0].(int64); outcome {
	case 3:
		return store.AppendResult{}, fmt.Errorf("redisstore: append to %s: %w: the job is not held by the lease", c, store.ErrConflict)
	case 2:
		return store.AppendResult{}, fmt.Errorf("redisstore: append to %s: %w", c, store.ErrKeyReused)
	case 1:
		var out []event.Event
		for i := 1; i+1 < len(reply); i += 2 {
			id, err := parseID(reply[i])
			if err != nil {
				return store.AppendResult{}, err
			}
			body, _ := reply[i+1].(string)
			if body == "" {
				// Trimmed since by MAXLEN: only the position remains.
				out = append(out, event.Event{ID: id, Subject: c.ID})
				continue
			}
			e, err := event.DecodeStored(id, []byte(body))
			if err != nil {
				return store.AppendResult{}, fmt.Errorf("redisstore: append: replayed entry %v: %w", id, err)
			}
			out = append(out, e)
		}
		return store.AppendResult{Events: out, Replayed: true}, nil
	}
	// The script stored the events, whatever this reply turns out to hold.
	if s.opts.Appended != nil {
		s.opts.Appended(len(evs))
	}
	if len(reply) != len(evs)+1 {
		return store.AppendResult{}, fmt.Errorf("redisstore: append: %d ids for %d events", len(reply)-1, len(evs))
	}
	out := make([]event.Event, len(evs))
	for i, e := range evs {
		id, err := parseID(reply[i+1])
		if err != nil {
			return store.AppendResult{}, err
		}
		e.ID = id
		out[i] = e
	}
	return store.AppendResult{Events: out}, nil
}

func parseID(v any) (event.ID, error) {
	s, _ := v.(string)
	id, err := event.ParseID(s)
	if err != nil {
		return event.ID{}, fmt.Errorf("redisstore: entry id %q: %w", s, err)
	}
	return id, nil
}

func rangeStart(id event.ID) string {
	if id.IsZero() {
		return "-"
	}
	return formatID(id)
}

func rangeEnd(id event.ID) string {
	if id == event.MaxID {
		return "+"
	}
	return formatID(id)
}

// formatID is the text of an id as a Redis range bound.
func formatID(id event.ID) string {
	return strconv.FormatUint(id.MS, 10) + "-" + strconv.FormatUint(id.Seq, 10)
}

// maxLen is the approximate cap on the streams of a context type.
func (s *Store) maxLen(typ string) int64 {
	if n, ok := s.opts.MaxLenByType[typ]; ok {
		return n
	}
	return s.opts.MaxLen
}
