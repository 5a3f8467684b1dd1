package pgstore

import (
	"context"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// kindTrimLimit bounds the expired entries one append removes from a kind,
// so cleaning never makes one append slow.
const kindTrimLimit = 64

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
