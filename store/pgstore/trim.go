package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Trim removes c's events below before, never the newest. Errors:
// ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) Trim(ctx context.Context, c store.Context, before event.ID) (int64, error) {
	if err := checkContext(c); err != nil {
		return 0, err
	}
	if before.IsZero() {
		return 0, invalid("trim of %s before the zero id", c)
	}
	if err := s.ready(ctx); err != nil {
		return 0, err
	}
	ck := contextKey(c)
	bms, bseq := pgID(before)
	var n int64
	err := s.write(ctx, func(tx pgx.Tx) error {
		// Under the stream lock, so the newest event cannot change meanwhile.
		var lastMS, lastSeq, length int64
		err := tx.QueryRow(ctx, `SELECT last_ms, last_seq, length FROM nqd_streams WHERE ctx = $1 FOR UPDATE`, ck).
			Scan(&lastMS, &lastSeq, &length)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && length == 0) {
			return nil
		}
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM nqd_events WHERE ctx = $1 AND (ms, seq) < ($2, $3)
			AND (ms, seq) < (SELECT ms, seq FROM nqd_events WHERE ctx = $1 ORDER BY ms DESC, seq DESC LIMIT 1)`,
			ck, bms, bseq)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		_, err = tx.Exec(ctx, `UPDATE nqd_streams SET length = length - $2 WHERE ctx = $1`, ck, n)
		return err
	})
	if err != nil {
		return 0, dbErr(err)
	}
	return n, nil
}
