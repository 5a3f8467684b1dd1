package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// PutCheckpoint stores state as c's checkpoint at at and keeps only the newest
// few. Errors: ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) PutCheckpoint(ctx context.Context, c store.Context, at event.ID, state []byte) error {
	if err := checkContext(c); err != nil {
		return err
	}
	if at.IsZero() {
		return invalid("checkpoint at the zero id")
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	ms, seq := pgID(at)
	err := s.write(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlCheckpointPut, contextKey(c), ms, seq, state); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sqlCheckpointTrim, contextKey(c), keepCheckpoints)
		return err
	})
	return dbErr(err)
}

// Checkpoint returns c's newest checkpoint at or before atOrBefore. Errors:
// ErrNotFound, ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) Checkpoint(ctx context.Context, c store.Context, atOrBefore event.ID) (event.ID, []byte, error) {
	if err := checkContext(c); err != nil {
		return event.ID{}, nil, err
	}
	if err := s.ready(ctx); err != nil {
		return event.ID{}, nil, err
	}
	bms, bseq := pgID(atOrBefore)
	var ms, seq int64
	var state []byte
	if err := s.pool.QueryRow(ctx, sqlCheckpointGet, contextKey(c), bms, bseq).Scan(&ms, &seq, &state); err != nil {
		return event.ID{}, nil, dbErr(err)
	}
	return event.ID{MS: uint64(ms), Seq: uint64(seq)}, state, nil
}
