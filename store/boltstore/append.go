package boltstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// appendReq is one Append waiting for the writer goroutine.
type appendReq struct {
	c      store.Context
	ck     []byte
	evs    []event.Event
	bodies [][]byte
	key    string
	fp     [sha256.Size]byte // the bodies' store.Fingerprint, with a key
	same   bool              // store.AppendOptions.SameRequest
	// hook, when set, runs first in the append's transaction: an error
	// wrapping store.ErrConflict ends the append with that error and writes
	// nothing; any other error fails the transaction.
	hook func(tx *bolt.Tx) error
	// kinds records the events in the kind index (Append's events, not a
	// run update's).
	kinds bool
	// remember keeps key for the events without looking it up first: a run
	// update's key (store.RunUpdate.IdempotencyKey), which never replays.
	remember bool

	res  store.AppendResult
	err  error
	done chan struct{}
}

// Append stores evs at the end of c's stream, maintains the indexes and
// publishes the events to c's subscribers once they are on disk. Errors:
// ErrInvalid, ErrClosed, ErrUnavailable, or ctx's error if it ends before the
// append was handed to the writer (then nothing was written).
func (s *Store) Append(ctx context.Context, c store.Context, evs []event.Event, opts store.AppendOptions) (store.AppendResult, error) {
	r, err := newAppendReq(c, evs, opts)
	if err != nil {
		return store.AppendResult{}, err
	}
	r.kinds = true
	if h := opts.Held; h != nil {
		r.hook = func(tx *bolt.Tx) error { return checkHeld(tx, *h) }
	}
	return s.submit(ctx, r)
}

// submit hands r to the writer and waits for its outcome. Errors: ErrClosed,
// or ctx's error if it ends before the hand-over (then nothing was written).
func (s *Store) submit(ctx context.Context, r *appendReq) (store.AppendResult, error) {
	if err := ctx.Err(); err != nil {
		return store.AppendResult{}, err
	}
	select {
	case s.reqs <- r:
	case <-s.quit:
		return store.AppendResult{}, errClosed
	case <-ctx.Done():
		return store.AppendResult{}, ctx.Err()
	}
	// Once handed over the append will be committed or fail as a whole;
	// leaving on ctx here would hide which.
	<-r.done
	return r.res, r.err
}

// update runs fn in the writer's next commit, so that a write without
// events (a claim, a heartbeat, a run update without events) shares the
// commit and its fsync with the appends and other writes queued with it
// instead of taking bbolt's writer lock and an fsync of its own. fn may run
// more than once (the group's transaction fails and each write is retried
// alone), so it must set its results afresh each time. An error wrapping
// store.ErrConflict is returned with nothing written. Errors: as submit's,
// and fn's.
func (s *Store) update(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	_, err := s.submit(ctx, &appendReq{hook: fn, done: make(chan struct{})})
	return err
}

// newAppendReq checks and encodes everything before the write transaction, so
// a bad event rejects the batch without touching the file.
func newAppendReq(c store.Context, evs []event.Event, opts store.AppendOptions) (*appendReq, error) {
	if err := checkContext(c); err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, invalid("empty batch")
	}
	if len(opts.IdempotencyKey) > maxIdempotencyKey {
		return nil, invalid("idempotency key longer than %d bytes", maxIdempotencyKey)
	}
	if opts.Held != nil && !event.ValidName(opts.Held.Queue) {
		return nil, invalid("queue %q", opts.Held.Queue)
	}
	r := &appendReq{
		c: c, ck: contextKey(c), evs: evs, key: opts.IdempotencyKey, same: opts.SameRequest,
		done: make(chan struct{}),
	}
	var err error
	if r.bodies, err = store.EncodeEvents(evs); err != nil {
		return nil, err
	}
	if r.key != "" {
		r.fp = store.Fingerprint(r.bodies)
	}
	return r, nil
}

// writeLoop serves appends until Close. Appends that queue up while a commit
// is syncing share the next commit: one fsync for many appends.
func (s *Store) writeLoop() {
	defer close(s.writerDone)
	group := make([]*appendReq, 0, maxGroup)
	for {
		select {
		case r := <-s.reqs:
			group = append(group[:0], r)
		case <-s.quit:
			return
		}
	gather:
		for len(group) < maxGroup {
			select {
			case r := <-s.reqs:
				group = append(group, r)
			default:
				break gather
			}
		}
		s.commit(group)
		// Publishing here, on the only writer, keeps delivery in commit order.
		for _, r := range group {
			if r.err == nil && !r.res.Replayed && len(r.res.Events) > 0 {
				s.publish(string(r.ck), r.res.Events)
				if s.opts.Appended != nil {
					s.opts.Appended(len(r.res.Events))
				}
			}
			close(r.done)
		}
	}
}

// commit writes group in one transaction. If that fails, each append is
// retried alone so one bad append cannot fail its neighbours.
func (s *Store) commit(group []*appendReq) {
	nowMS := uint64(max(s.opts.Now().UnixMilli(), 0))
	err := s.db.Update(func(tx *bolt.Tx) error {
		sweepIdempotency(tx, nowMS)
		for _, r := range group {
			if err := s.apply(tx, r, nowMS); err != nil {
				return fmt.Errorf("append to %s: %w", r.c, err)
			}
		}
		return nil
	})
	if err == nil {
		return
	}
	if len(group) > 1 {
		for _, r := range group {
			s.commit([]*appendReq{r})
		}
		return
	}
	s.log.Error().Err(err).Str("context", group[0].c.String()).Msg("append failed")
	group[0].res = store.AppendResult{}
	group[0].err = dbErr(err)
}

// apply writes one append inside tx and records its result in r.
func (s *Store) apply(tx *bolt.Tx, r *appendReq, nowMS uint64) error {
	r.res, r.err = store.AppendResult{}, nil
	if r.hook != nil {
		if err := r.hook(tx); err != nil {
			if errors.Is(err, store.ErrConflict) {
				r.err = err
				return nil
			}
			return err
		}
	}
	if len(r.evs) == 0 {
		return nil // a write of update's: the hook was all of it
	}
	if r.key != "" && !r.remember {
		replay, fp, ok, err := lookupIdempotent(tx, r.ck, r.key, nowMS)
		if err != nil {
			return err
		}
		if ok && r.same && fp != nil && !bytes.Equal(fp, r.fp[:]) {
			r.err = fmt.Errorf("boltstore: append to %s: %w", r.c, store.ErrKeyReused)
			return nil
		}
		if ok {
			r.res = store.AppendResult{Events: replay, Replayed: true}
			return nil
		}
	}

	stream, err := growing(tx.Bucket(bStreams)).CreateBucketIfNotExists(r.ck)
	if err != nil {
		return err
	}
	growing(stream)
	var last event.ID
	if k, _ := stream.Cursor().Last(); k != nil {
		last = parseIDKey(k)
	}
	// The clock may step back; the stream's ids may not.
	id := event.ID{MS: nowMS}
	if id.Compare(last) <= 0 {
		id = last.Next()
	}

	out := make([]event.Event, len(r.evs))
	keys := make([]byte, 0, len(r.evs)*idLen)
	for i, e := range r.evs {
		if err := stream.Put(idKey(id), r.bodies[i]); err != nil {
			return err
		}
		e.ID = id
		out[i] = e
		keys = append(keys, idKey(id)...)
		id = id.Next()
	}

	n := streamLength(tx, r.ck)
	if err := setStreamLength(tx, r.ck, n+uint64(len(out))); err != nil {
		return err
	}
	if err := indexEvents(tx, r.c, out, n == 0); err != nil {
		return err
	}
	if r.kinds {
		if err := s.indexKinds(tx, r.c, out, r.bodies, nowMS); err != nil {
			return err
		}
	}
	if r.key != "" {
		if err := rememberIdempotent(tx, r.ck, r.key, nowMS+uint64(s.opts.IdempotencyWindow.Milliseconds()), r.fp, keys); err != nil {
			return err
		}
	}
	r.res = store.AppendResult{Events: out}
	return nil
}

// indexEvents applies the index rules of the store.Store contract to newly
// appended events.
func indexEvents(tx *bolt.Tx, c store.Context, evs []event.Event, first bool) error {
	if first {
		if err := indexAdd(tx, store.Index{Type: c.Type}, c.ID, int64(evs[0].ID.MS)); err != nil {
			return err
		}
	}
	for _, e := range evs {
		if ix, ok := store.JoinedIndex(e); ok {
			if err := indexAdd(tx, ix, c.ID, int64(e.ID.MS)); err != nil {
				return err
			}
		}
	}
	return nil
}

// An idempotency record is its expiry (8 bytes), fpTag and the fingerprint
// of the events, then their ids. Records written before fingerprints were
// kept hold no tag: their length after the expiry is a multiple of idLen.
const fpTag = 0xf1

// lookupIdempotent returns the events of an earlier append with key, if its
// record has not expired, and their fingerprint (nil in an older record).
func lookupIdempotent(tx *bolt.Tx, ck []byte, key string, nowMS uint64) ([]event.Event, []byte, bool, error) {
	b := tx.Bucket(bIdem).Bucket(ck)
	if b == nil {
		return nil, nil, false, nil
	}
	rec := b.Get([]byte(key))
	if len(rec) < 8 || getUint64(rec) <= nowMS {
		return nil, nil, false, nil
	}
	ids, fp := rec[8:], []byte(nil)
	if len(ids)%idLen == (1+sha256.Size)%idLen && ids[0] == fpTag {
		fp, ids = ids[1:1+sha256.Size], ids[1+sha256.Size:]
	}
	stream := tx.Bucket(bStreams).Bucket(ck)
	if stream == nil {
		return nil, nil, false, nil
	}
	var out []event.Event
	for k := ids; len(k) >= idLen; k = k[idLen:] {
		body := stream.Get(k[:idLen])
		if body == nil {
			// The events are gone, so there is nothing to replay: append anew.
			return nil, nil, false, nil
		}
		e, err := event.DecodeStored(parseIDKey(k), body)
		if err != nil {
			return nil, nil, false, fmt.Errorf("decode %s: %w", parseIDKey(k), err)
		}
		out = append(out, e)
	}
	return out, fp, len(out) > 0, nil
}

func rememberIdempotent(tx *bolt.Tx, ck []byte, key string, expiry uint64, fp [sha256.Size]byte, ids []byte) error {
	b, err := tx.Bucket(bIdem).CreateBucketIfNotExists(ck)
	if err != nil {
		return err
	}
	rec := binary.BigEndian.AppendUint64(make([]byte, 0, 9+sha256.Size+len(ids)), expiry)
	rec = append(append(rec, fpTag), fp[:]...)
	if err := b.Put([]byte(key), append(rec, ids...)); err != nil {
		return err
	}
	return growing(tx.Bucket(bIdemExp)).Put(expiryKey(expiry, ck, key), []byte{})
}

// expiryKey orders idempotency records by expiry so the sweep reads only the
// expired ones. Context keys hold no NUL, so the first NUL ends them.
func expiryKey(expiry uint64, ck []byte, key string) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(ck)+1+len(key)), expiry)
	k = append(k, ck...)
	k = append(k, 0)
	return append(k, key...)
}

// sweepIdempotency deletes a bounded number of expired idempotency records.
// A record rewritten with a later expiry since is left alone.
func sweepIdempotency(tx *bolt.Tx, nowMS uint64) {
	exp := tx.Bucket(bIdemExp)
	var dead [][]byte
	cur := exp.Cursor()
	for k, _ := cur.First(); k != nil && len(dead) < sweepLimit; k, _ = cur.Next() {
		if getUint64(k) > nowMS {
			break
		}
		dead = append(dead, bytes.Clone(k))
	}
	idem := tx.Bucket(bIdem)
	for _, k := range dead {
		// Deleting from a read-write transaction's bucket only fails on
		// misuse, which would also fail the appends that follow.
		_ = exp.Delete(k)
		ck, key, ok := bytes.Cut(k[8:], []byte{0})
		if !ok {
			continue
		}
		if b := idem.Bucket(ck); b != nil {
			if rec := b.Get(key); rec != nil && getUint64(rec) == getUint64(k) {
				_ = b.Delete(key)
			}
		}
	}
}
