package boltstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

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
	return s.submit(ctx, r)
}

// submit queues r for the next commit and waits for its outcome. Errors:
// ErrClosed, or ctx's error if it ends while r is still queued (then nothing
// was written).
func (s *Store) submit(ctx context.Context, r *appendReq) (store.AppendResult, error) {
	if err := ctx.Err(); err != nil {
		return store.AppendResult{}, err
	}
	w := &s.writer
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return store.AppendResult{}, errClosed
	}
	w.queue = append(w.queue, r)
	if !w.leading {
		w.leading = true
		w.running.Add(1)
		w.mu.Unlock()
		s.lead(r)
		return r.res, r.err
	}
	w.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		if w.unqueue(r) {
			return store.AppendResult{}, ctx.Err()
		}
		// Taken into a commit already: it will be written or fail as a
		// whole, and leaving now would hide which.
		<-r.done
	}
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

// writer turns concurrent writes into group commits without a goroutine
// of its own. A write that arrives while no commit runs leads: on its own
// goroutine it commits itself and whatever queued meanwhile. Writes that
// arrive during a commit queue and share the next one, one fsync for all of
// them; the leader, once its own write is answered, hands the next commit to
// a new goroutine. A lone write so costs no hand-over between goroutines, and
// one commit at a time keeps publishing in commit order.
type writer struct {
	mu      sync.Mutex
	queue   []*appendReq
	leading bool // a goroutine is committing, or about to
	closed  bool
	running sync.WaitGroup // the leading goroutine, for Close
}

// unqueue takes r out of the queue, unless a commit took it already.
func (w *writer) unqueue(r *appendReq) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := slices.Index(w.queue, r)
	if i < 0 {
		return false
	}
	w.queue = slices.Delete(w.queue, i, i+1)
	return true
}

// next takes the writes of the next commit; none means leading has ended.
func (w *writer) next() []*appendReq {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := min(len(w.queue), maxGroup)
	if n == 0 {
		w.leading = false
		w.running.Done()
		return nil
	}
	group := slices.Clone(w.queue[:n])
	w.queue = slices.Delete(w.queue, 0, n)
	return group
}

// lead commits queued writes until the queue is empty; once mine is
// answered, the rest goes on on a new goroutine, so that its caller is
// answered at once.
func (s *Store) lead(mine *appendReq) {
	for group := s.writer.next(); group != nil; group = s.writer.next() {
		s.commitGroup(group)
		if mine != nil && slices.Contains(group, mine) {
			go s.lead(nil)
			return
		}
	}
}

// commitGroup commits group and answers each write. A panic (bbolt rolls
// the transaction back) answers the group's unanswered writes with an
// error and passes the lead on before it goes up, so that the writes
// behind are not left waiting for a leader that is gone.
func (s *Store) commitGroup(group []*appendReq) {
	answered := 0
	defer func() {
		if p := recover(); p != nil {
			for _, r := range group[answered:] {
				r.res, r.err = store.AppendResult{}, fmt.Errorf("boltstore: write panicked: %v", p)
				close(r.done)
			}
			go s.lead(nil)
			panic(p)
		}
	}()
	s.commit(group)
	for _, r := range group {
		if r.err == nil && !r.res.Replayed && len(r.res.Events) > 0 {
			s.publish(string(r.ck), r.res.Events)
			if s.opts.Appended != nil {
				s.opts.Appended(len(r.res.Events))
			}
		}
		close(r.done)
		answered++
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
	if r.key != "" {
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

	stream, err := tx.Bucket(bStreams).CreateBucketIfNotExists(r.ck)
	if err != nil {
		return err
	}
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

	lengths := tx.Bucket(bLengths)
	n := getUint64(lengths.Get(r.ck))
	if err := lengths.Put(r.ck, putUint64(n+uint64(len(out)))); err != nil {
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
	return tx.Bucket(bIdemExp).Put(expiryKey(expiry, ck, key), []byte{})
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
