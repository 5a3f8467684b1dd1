package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// querier is what reads need of a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Range reads c's events selected by q. Errors: ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) Range(ctx context.Context, c store.Context, q store.RangeQuery) ([]event.Event, error) {
	if err := checkContext(c); err != nil {
		return nil, err
	}
	if q.Limit < 0 {
		return nil, invalid("negative limit %d", q.Limit)
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	lo, hi, ok := q.Bounds()
	if !ok {
		return []event.Event{}, nil
	}
	query := sqlRange
	if q.Reverse {
		query = sqlRangeReverse
	}
	out, err := rangeQuery(ctx, s.pool, query, contextKey(c), lo, hi, q.Limit)
	if err != nil {
		return nil, dbErr(err)
	}
	return out, nil
}

// rangeQuery runs one of the range queries for lo <= id < hi; limit 0 means
// none.
func rangeQuery(ctx context.Context, db querier, query, ck string, lo, hi event.ID, limit int) ([]event.Event, error) {
	loMS, loSeq := pgID(lo)
	hiMS, hiSeq := pgID(hi)
	lim := int64(math.MaxInt64)
	if limit > 0 {
		lim = int64(limit)
	}
	rows, err := db.Query(ctx, query, ck, loMS, loSeq, hiMS, hiSeq, lim)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []event.Event{}
	var dec event.Decoder
	for rows.Next() {
		var ms, seq int64
		var body []byte
		if err := rows.Scan(&ms, &seq, &body); err != nil {
			return nil, err
		}
		id := event.ID{MS: uint64(ms), Seq: uint64(seq)}
		e, err := dec.Decode(id, body)
		if err != nil {
			return nil, fmt.Errorf("decode %s %s: %w", ck, id, err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// Info returns c's length and first and last ids. Errors: ErrInvalid,
// ErrClosed, ErrUnavailable.
func (s *Store) Info(ctx context.Context, c store.Context) (store.StreamInfo, error) {
	if err := checkContext(c); err != nil {
		return store.StreamInfo{}, err
	}
	if err := s.ready(ctx); err != nil {
		return store.StreamInfo{}, err
	}
	var info store.StreamInfo
	var fms, fseq, lms, lseq int64
	err := s.pool.QueryRow(ctx, sqlInfo, contextKey(c)).Scan(&info.Length, &fms, &fseq, &lms, &lseq)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.StreamInfo{}, nil
	}
	if err != nil {
		return store.StreamInfo{}, dbErr(err)
	}
	info.FirstID = event.ID{MS: uint64(fms), Seq: uint64(fseq)}
	info.LastID = event.ID{MS: uint64(lms), Seq: uint64(lseq)}
	return info, nil
}

// IndexAdd adds id to ix with score unless it is a member already. Errors:
// ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) IndexAdd(ctx context.Context, ix store.Index, id string, score int64) error {
	if !ix.Valid() {
		return invalid("index %+v", ix)
	}
	if !event.ValidName(id) {
		return invalid("index member %q", id)
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, sqlIndexAdd, indexKey(ix), id, score)
	return dbErr(err)
}

// IndexList returns limit members of ix after skipping offset, highest score
// first, ties by id. Errors: ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) IndexList(ctx context.Context, ix store.Index, offset, limit int) (store.IndexPage, error) {
	if !ix.Valid() {
		return store.IndexPage{}, invalid("index %+v", ix)
	}
	if offset < 0 || limit < 0 {
		return store.IndexPage{}, invalid("offset %d, limit %d", offset, limit)
	}
	if err := s.ready(ctx); err != nil {
		return store.IndexPage{}, err
	}
	page := store.IndexPage{Entries: []store.IndexEntry{}}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, sqlIndexCount, indexKey(ix)).Scan(&page.Total); err != nil {
			return err
		}
		if limit == 0 {
			return nil
		}
		rows, err := tx.Query(ctx, sqlIndexList, indexKey(ix), offset, limit)
		if err != nil {
			return err
		}
		for rows.Next() {
			var e store.IndexEntry
			if err := rows.Scan(&e.ID, &e.Score); err != nil {
				return err
			}
			page.Entries = append(page.Entries, e)
		}
		return rows.Err()
	})
	if err != nil {
		return store.IndexPage{}, dbErr(err)
	}
	return page, nil
}
