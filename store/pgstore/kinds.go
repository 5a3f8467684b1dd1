package pgstore

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

var _ store.KindIndex = (*Store)(nil)

// kindTrimLimit bounds the expired entries one append removes from a kind,
// so cleaning never makes one append slow.
const kindTrimLimit = 64

// indexKinds records evs of watched kinds in the kind index. Each kind's
// row is locked while its entries are written, so a kind's positions follow
// commit order and a reader's cursor never skips an entry that commits late.
func (s *Store) indexKinds(ctx context.Context, tx pgx.Tx, b *batch, evs []event.Event, nowMS int64) error {
	kinds := make([]string, 0, len(evs))
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	slices.Sort(kinds)
	kinds = slices.Compact(kinds)
	// Locked in name order, the same in every transaction, so two appends
	// never wait on each other's kinds.
	rows, err := tx.Query(ctx, `SELECT kind, last_ms, last_seq FROM nqd_watched_kinds
		WHERE kind = ANY($1) ORDER BY kind FOR UPDATE`, kinds)
	if err != nil {
		return err
	}
	last := map[string]event.ID{}
	for rows.Next() {
		var kind string
		var ms, seq int64
		if err := rows.Scan(&kind, &ms, &seq); err != nil {
			rows.Close()
			return err
		}
		last[kind] = event.ID{MS: uint64(ms), Seq: uint64(seq)}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(last) == 0 {
		return nil
	}
	for i, e := range evs {
		prev, ok := last[e.Kind]
		if !ok {
			continue
		}
		pos := event.ID{MS: uint64(max(nowMS, 0))}
		if pos.Compare(prev) <= 0 {
			pos = prev.Next()
		}
		last[e.Kind] = pos
		pms, pseq := pgID(pos)
		ems, eseq := pgID(e.ID)
		if _, err := tx.Exec(ctx, `INSERT INTO nqd_kind_events (kind, ms, seq, ctx_type, ctx_id, ev_ms, ev_seq, body)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, e.Kind, pms, pseq, b.c.Type, b.c.ID, ems, eseq, b.bodies[i]); err != nil {
			return err
		}
	}
	window := s.kindWindow().Milliseconds()
	for kind, pos := range last {
		ms, seq := pgID(pos)
		if _, err := tx.Exec(ctx, `UPDATE nqd_watched_kinds SET last_ms = $2, last_seq = $3 WHERE kind = $1`, kind, ms, seq); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM nqd_kind_events WHERE kind = $1 AND (ms, seq) IN (
			SELECT ms, seq FROM nqd_kind_events WHERE kind = $1 AND ms + $2 < $3 ORDER BY ms, seq LIMIT $4)`,
			kind, window, nowMS, kindTrimLimit); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) kindWindow() time.Duration {
	if s.opts.KindWindow > 0 {
		return s.opts.KindWindow
	}
	return store.DefaultKindWindow
}

// WatchKinds makes appends record events of kinds in the kind index.
// Errors: ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) WatchKinds(ctx context.Context, kinds ...string) error {
	for _, k := range kinds {
		if !event.ValidKind(k) {
			return invalid("watch kinds: kind %q", k)
		}
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	if len(kinds) == 0 {
		return nil
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO nqd_watched_kinds (kind) SELECT unnest($1::text[]) ON CONFLICT (kind) DO NOTHING`, kinds)
	return dbErr(err)
}

// KindEvents returns up to limit entries of kind after position after,
// oldest first. Errors: ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) KindEvents(ctx context.Context, kind string, after event.ID, limit int) ([]store.KindEntry, error) {
	if !event.ValidKind(kind) || limit < 1 || limit > 1000 {
		return nil, invalid("kind events: kind %q, limit %d", kind, limit)
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	ams, aseq := pgID(after)
	rows, err := s.pool.Query(ctx, `SELECT ms, seq, ctx_type, ctx_id, ev_ms, ev_seq, body, consumed_by IS NOT NULL
		FROM nqd_kind_events WHERE kind = $1 AND (ms, seq) > ($2, $3)
		ORDER BY ms, seq LIMIT $4`, kind, ams, aseq, limit)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []store.KindEntry
	for rows.Next() {
		var ms, seq, ems, eseq int64
		var en store.KindEntry
		var body []byte
		if err := rows.Scan(&ms, &seq, &en.Context.Type, &en.Context.ID, &ems, &eseq, &body, &en.Consumed); err != nil {
			return nil, dbErr(err)
		}
		en.Seq = event.ID{MS: uint64(ms), Seq: uint64(seq)}
		if en.Event, err = event.DecodeStored(event.ID{MS: uint64(ems), Seq: uint64(eseq)}, body); err != nil {
			return nil, invalid("kind entry %s: %v", en.Seq, err)
		}
		out = append(out, en)
	}
	return out, dbErr(rows.Err())
}
