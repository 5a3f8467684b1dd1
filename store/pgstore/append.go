package pgstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// batch is one append, checked and encoded before its transaction starts so
// a bad event rejects it without a round trip.
type batch struct {
	c      store.Context
	ck     string
	evs    []event.Event
	bodies [][]byte
	key    string
	fp     [sha256.Size]byte // the bodies' store.Fingerprint, with a key
	same   bool              // store.AppendOptions.SameRequest
}

// Append stores evs at the end of c's stream, maintains the indexes and
// notifies c's subscribers on every instance once committed. Errors:
// ErrInvalid, ErrClosed, ErrUnavailable, or ctx's error.
func (s *Store) Append(ctx context.Context, c store.Context, evs []event.Event, opts store.AppendOptions) (store.AppendResult, error) {
	b, err := newBatch(c, evs, opts.IdempotencyKey)
	if err != nil {
		return store.AppendResult{}, err
	}
	b.same = opts.SameRequest
	if err := s.ready(ctx); err != nil {
		return store.AppendResult{}, err
	}
	var res store.AppendResult
	err = s.write(ctx, func(tx pgx.Tx) error {
		var err error
		res, err = s.appendTx(ctx, tx, b, true)
		return err
	})
	if err != nil {
		return store.AppendResult{}, err
	}
	s.appended(res)
	return res, nil
}

// write runs fn in a transaction and commits it. A commit whose answer was
// lost (the connection broke after COMMIT went out) may have been applied:
// that is ErrOutcomeUnknown, never ErrUnavailable, which promises nothing
// was written.
func (s *Store) write(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return dbErr(err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.Background())
		return dbErr(err)
	}
	if err := tx.Commit(ctx); err != nil {
		// Only an ERROR answer is the server refusing the commit. A broken
		// connection, or a FATAL that a dying backend sends after it may
		// have committed, leaves the outcome open.
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Severity == "ERROR" {
			return dbErr(err)
		}
		return fmt.Errorf("pgstore: %w: commit: %w", store.ErrOutcomeUnknown, err)
	}
	return nil
}

func (s *Store) appended(res store.AppendResult) {
	if s.opts.Appended != nil && !res.Replayed {
		s.opts.Appended(len(res.Events))
	}
}

func newBatch(c store.Context, evs []event.Event, key string) (*batch, error) {
	if err := checkContext(c); err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, invalid("empty batch")
	}
	if len(key) > maxIdempotencyKey {
		return nil, invalid("idempotency key longer than %d bytes", maxIdempotencyKey)
	}
	b := &batch{c: c, ck: contextKey(c), evs: evs, key: key, bodies: make([][]byte, len(evs))}
	for i, e := range evs {
		if !event.ValidKind(e.Kind) {
			return nil, invalid("event %d: kind %q", i, e.Kind)
		}
		if ix, ok := store.JoinedIndex(e); ok && !ix.Valid() {
			return nil, invalid("event %d: flow name %q", i, e.FlowName)
		}
		body, err := e.MarshalBody()
		if err != nil {
			return nil, invalid("event %d: %v", i, err)
		}
		b.bodies[i] = body
	}
	if key != "" {
		b.fp = store.Fingerprint(b.bodies)
	}
	return b, nil
}

// appendTx writes b inside tx: the stream row lock, the events, the indexes
// (with kinds, the kind index too), the idempotency record and the
// notification that is sent on commit.
func (s *Store) appendTx(ctx context.Context, tx pgx.Tx, b *batch, kinds bool) (store.AppendResult, error) {
	var lastMS, lastSeq, length, nowMS int64
	if err := tx.QueryRow(ctx, sqlLockStream, b.ck).Scan(&lastMS, &lastSeq, &length, &nowMS); err != nil {
		return store.AppendResult{}, err
	}
	if b.key != "" {
		// Looked up under the stream lock, so a concurrent repeat of the
		// same key waits for the first and then replays it.
		replay, fp, ok, err := lookupIdempotent(ctx, tx, b.ck, b.key, nowMS)
		if err != nil {
			return store.AppendResult{}, err
		}
		if ok && b.same && fp != nil && !bytes.Equal(fp, b.fp[:]) {
			return store.AppendResult{}, fmt.Errorf("pgstore: append to %s: %w", b.c, store.ErrKeyReused)
		}
		if ok {
			return store.AppendResult{Events: replay, Replayed: true}, nil
		}
	}

	// The clock may step back; the stream's ids may not.
	last := event.ID{MS: uint64(lastMS), Seq: uint64(lastSeq)}
	id := event.ID{MS: uint64(max(nowMS, 0))}
	if id.Compare(last) <= 0 {
		id = last.Next()
	}
	out := make([]event.Event, len(b.evs))
	ms := make([]int64, len(b.evs))
	seqs := make([]int64, len(b.evs))
	evKinds := make([]string, len(b.evs))
	for i, e := range b.evs {
		if id.Seq > math.MaxInt64 {
			id = event.ID{MS: id.MS + 1}
		}
		e.ID = id
		out[i] = e
		ms[i], seqs[i], evKinds[i] = int64(id.MS), int64(id.Seq), e.Kind
		id = id.Next()
	}
	first, newest := out[0].ID, out[len(out)-1].ID

	// The writes need no answer from each other, so they travel together:
	// one round trip however many indexes the batch touches.
	wb := &pgx.Batch{}
	wb.Queue(sqlInsertEvents, b.ck, ms, seqs, evKinds, b.bodies)
	wb.Queue(sqlAdvanceStream, b.ck, int64(newest.MS), int64(newest.Seq), len(out))
	indexEvents(wb, b.c, out, length == 0)
	if b.key != "" {
		expires := nowMS + s.opts.IdempotencyWindow.Milliseconds()
		wb.Queue(sqlIdemSweep, nowMS)
		wb.Queue(sqlIdemPut, b.ck, b.key, expires,
			int64(first.MS), int64(first.Seq), int64(newest.MS), int64(newest.Seq), len(out), b.fp[:])
	}
	wb.Queue("SELECT pg_notify($1, $2)", s.channel, b.ck+" "+newest.String())
	var watched map[string]event.ID
	if kinds {
		wb.Queue(sqlLockWatchedKinds, distinctKinds(out)).Query(func(rows pgx.Rows) error {
			var err error
			watched, err = scanWatched(rows)
			return err
		})
	}
	if err := tx.SendBatch(ctx, wb).Close(); err != nil {
		return store.AppendResult{}, err
	}
	if len(watched) > 0 {
		if err := s.indexKinds(ctx, tx, b, out, watched, nowMS); err != nil {
			return store.AppendResult{}, err
		}
	}
	return store.AppendResult{Events: out}, nil
}

// lookupIdempotent returns the events of an earlier append with key, if its
// record has not expired and its events are all still there, and their
// fingerprint (nil in a record written before fingerprints were kept).
func lookupIdempotent(ctx context.Context, tx pgx.Tx, ck, key string, nowMS int64) ([]event.Event, []byte, bool, error) {
	var fms, fseq, lms, lseq int64
	var count int
	var fp []byte
	err := tx.QueryRow(ctx, sqlIdemLookup, ck, key, nowMS).Scan(&fms, &fseq, &lms, &lseq, &count, &fp)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	hi := event.ID{MS: uint64(lms), Seq: uint64(lseq)}.Next()
	evs, err := rangeQuery(ctx, tx, sqlRange, ck, event.ID{MS: uint64(fms), Seq: uint64(fseq)}, hi, nil, count)
	if err != nil {
		return nil, nil, false, err
	}
	if len(evs) != count {
		// Some events are gone, so there is nothing to replay: append anew.
		return nil, nil, false, nil
	}
	return evs, fp, true, nil
}

// indexEvents queues the index rules of the store.Store contract for newly
// appended events.
func indexEvents(wb *pgx.Batch, c store.Context, evs []event.Event, first bool) {
	if first {
		wb.Queue(sqlIndexAdd, indexKey(store.Index{Type: c.Type}), c.ID, int64(evs[0].ID.MS))
	}
	for _, e := range evs {
		if ix, ok := store.JoinedIndex(e); ok {
			wb.Queue(sqlIndexAdd, indexKey(ix), c.ID, int64(e.ID.MS))
		}
	}
}

func contextKey(c store.Context) string { return c.Type + ":" + c.ID }

func indexKey(ix store.Index) string {
	if ix.Name == "" {
		return ix.Type
	}
	return ix.Type + ":" + ix.Name
}

// pgID splits id into the two bigints of the tables, saturating the parts
// beyond int64 (bounds such as event.MaxID) at the largest stored value.
func pgID(id event.ID) (int64, int64) {
	return int64(min(id.MS, math.MaxInt64)), int64(min(id.Seq, math.MaxInt64))
}
