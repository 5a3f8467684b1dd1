package pgstore

import (
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
// notifies c's subscribers on every instance once committed: one call of
// nqd_append, its own transaction, so one round trip. Errors: ErrInvalid,
// ErrKeyReused, ErrOutcomeUnknown, ErrClosed, ErrUnavailable, or ctx's
// error.
func (s *Store) Append(ctx context.Context, c store.Context, evs []event.Event, opts store.AppendOptions) (store.AppendResult, error) {
	b, err := newBatch(c, evs, opts.IdempotencyKey)
	if err != nil {
		return store.AppendResult{}, err
	}
	b.same = opts.SameRequest
	if h := opts.Held; h != nil && !event.ValidName(h.Queue) {
		return store.AppendResult{}, invalid("queue %q", h.Queue)
	}
	if err := s.ready(ctx); err != nil {
		return store.AppendResult{}, err
	}
	// Acquired apart from the call, so that a failure to get a connection
	// is told from a call that went out.
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return store.AppendResult{}, dbErr(err)
	}
	defer conn.Release()
	var res store.AppendResult
	if h := opts.Held; h != nil {
		// One implicit transaction, still one round trip: the check raises
		// and the server skips the call.
		wb := &pgx.Batch{}
		wb.Queue(sqlHeld, h.Queue, h.ID, h.Lease, fmt.Sprintf("job %s is not held by lease %q", h.ID, h.Lease))
		wb.Queue(sqlAppend, s.appendArgs(b, true)...).Query(func(rows pgx.Rows) error {
			var err error
			res, err = scanAppend(rows, b)
			return err
		})
		err = conn.SendBatch(ctx, wb).Close()
	} else {
		res, err = s.appendCall(ctx, conn, b, true)
	}
	if err != nil {
		return store.AppendResult{}, callErr("append to "+b.c.String(), err)
	}
	s.appended(res)
	return res, nil
}

// callErr translates the failure of a call or pipeline that was its own
// transaction; what names the write. An ERROR answer means it was rolled
// back, and a failure before anything was sent that nothing was written;
// anything else (the connection broke while the call was out, the server
// died) leaves the outcome open.
func callErr(what string, err error) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == codeKeyReused:
		return fmt.Errorf("pgstore: %s: %w", what, store.ErrKeyReused)
	case errors.As(err, &pgErr) && pgErr.Code == codeConflict:
		return fmt.Errorf("%w: %s", errConflict, pgErr.Message)
	case errors.As(err, &pgErr) && pgErr.Severity == "ERROR",
		errors.Is(err, store.ErrUnavailable), pgconn.SafeToRetry(err):
		return dbErr(err)
	default:
		return fmt.Errorf("pgstore: %w: %s: %w", store.ErrOutcomeUnknown, what, err)
	}
}

// The SQLSTATEs nqd's functions raise (see migrations/).
const (
	// codeKeyReused: nqd_append met an idempotency key with other events
	// and the batch asked for that check.
	codeKeyReused = "NQ001"
	// codeConflict: a check of nqd_require failed; the message says which.
	codeConflict = "NQ409"
)

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
	bodies, err := store.EncodeEvents(evs)
	if err != nil {
		return nil, err
	}
	b := &batch{c: c, ck: contextKey(c), evs: evs, key: key, bodies: bodies}
	if key != "" {
		b.fp = store.Fingerprint(b.bodies)
	}
	return b, nil
}

// appendCall writes b with one call of nqd_append (see migrations/) on q, a
// pooled connection, where the call is its own transaction: the stream row
// lock, the ids, the events, the indexes, with kinds the kind index, the
// idempotency record and the notification sent on commit.
func (s *Store) appendCall(ctx context.Context, q querier, b *batch, kinds bool) (store.AppendResult, error) {
	rows, err := q.Query(ctx, sqlAppend, s.appendArgs(b, kinds)...)
	if err != nil {
		return store.AppendResult{}, err
	}
	defer rows.Close()
	return scanAppend(rows, b)
}

// appendArgs are the arguments of sqlAppend for b.
func (s *Store) appendArgs(b *batch, kinds bool) []any {
	evKinds := make([]string, len(b.evs))
	ix := make([]string, len(b.evs))
	for i, e := range b.evs {
		evKinds[i], ix[i] = e.Kind, eventIndex(e)
	}
	var fp []byte
	if b.key != "" {
		fp = b.fp[:]
	}
	return []any{b.ck, b.c.Type, b.c.ID, evKinds, b.bodies, ix,
		b.key, fp, b.same, s.opts.IdempotencyWindow.Milliseconds(), s.channel,
		kinds, s.kindWindow().Milliseconds(), kindTrimLimit}
}

// scanAppend reads the rows of sqlAppend: b's events with their ids, or the
// events of the append b repeats.
func scanAppend(rows pgx.Rows, b *batch) (store.AppendResult, error) {
	out := make([]event.Event, 0, len(b.evs))
	replayed := false
	var dec event.Decoder
	for rows.Next() {
		var ms, seq int64
		var body []byte
		if err := rows.Scan(&replayed, &ms, &seq, &body); err != nil {
			return store.AppendResult{}, err
		}
		id := event.ID{MS: uint64(ms), Seq: uint64(seq)}
		if !replayed {
			if len(out) == len(b.evs) {
				return store.AppendResult{}, fmt.Errorf("pgstore: append to %s: more ids than events", b.c)
			}
			e := b.evs[len(out)]
			e.ID = id
			out = append(out, e)
			continue
		}
		e, err := dec.Decode(id, body)
		if err != nil {
			// Nothing was written: a replay only reads.
			return store.AppendResult{}, fmt.Errorf("pgstore: %w: decode %s %s: %w", store.ErrUnavailable, b.ck, id, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return store.AppendResult{}, err
	}
	if !replayed && len(out) != len(b.evs) {
		return store.AppendResult{}, fmt.Errorf("pgstore: append to %s: %d ids for %d events", b.c, len(out), len(b.evs))
	}
	return store.AppendResult{Events: out, Replayed: replayed}, nil
}

// eventIndex is the key of the index e adds its context to
// (store.JoinedIndex), or "" for none.
func eventIndex(e event.Event) string {
	if ix, ok := store.JoinedIndex(e); ok {
		return indexKey(ix)
	}
	return ""
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
