package pgstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Restore writes evs with their ids as c's stream, and record as its run
// record, in one transaction. Errors: ErrConflict, ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) Restore(ctx context.Context, c store.Context, evs []event.Event, record *store.RunMeta) error {
	bodies, err := store.CheckRestore(c, evs, record)
	if err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	ck := contextKey(c)
	err = s.write(ctx, func(tx pgx.Tx) error {
		var lastMS, lastSeq, length, nowMS int64
		if err := tx.QueryRow(ctx, sqlLockStream, ck).Scan(&lastMS, &lastSeq, &length, &nowMS); err != nil {
			return err
		}
		if length != 0 {
			return fmt.Errorf("%w: %s has events", errConflict, c)
		}
		if record != nil {
			m := *record
			m.Version = max(m.Version, 1) // a stored record has been written at least once
			body, err := json.Marshal(m)
			if err != nil {
				return invalid("run record: %v", err)
			}
			var expires *int64
			if at := s.opts.Retention.ExpiresAt(m); at > 0 {
				expires = &at
			}
			tag, err := tx.Exec(ctx, sqlRunCreate, m.FlowName, m.RunID, m.Status, m.StartedAt, m.Version, expires, body)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("%w: run %s of %s has a record", errConflict, m.RunID, m.FlowName)
			}
		}
		ms := make([]int64, len(evs))
		seqs := make([]int64, len(evs))
		kinds := make([]string, len(evs))
		for i, e := range evs {
			ms[i], seqs[i] = pgID(e.ID)
			kinds[i] = e.Kind
		}
		if _, err := tx.Exec(ctx, sqlInsertEvents, ck, ms, seqs, kinds, bodies); err != nil {
			return err
		}
		last := evs[len(evs)-1].ID
		if lastMS, lastSeq = pgID(last); (event.ID{MS: uint64(lastMS), Seq: uint64(lastSeq)}) != last {
			return invalid("restore of %s: id %s beyond the stored range", c, last)
		}
		if _, err := tx.Exec(ctx, sqlAdvanceStream, ck, lastMS, lastSeq, len(evs)); err != nil {
			return err
		}
		wb := &pgx.Batch{}
		indexEvents(wb, c, evs, true)
		return tx.SendBatch(ctx, wb).Close()
	})
	return dbErr(err)
}
