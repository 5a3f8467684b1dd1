package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nqd-dev/nqd/store"
)

var (
	errKVNotFound = fmt.Errorf("pgstore: kv: %w", store.ErrNotFound)
	errKVConflict = fmt.Errorf("pgstore: kv: %w", store.ErrConflict)
)

// kvSweepLimit bounds the expired records one write removes.
const kvSweepLimit = 64

// kvRecord is a row of nqd_kv.
type kvRecord struct {
	version int64
	expires int64 // epoch ms; 0: never
	fields  map[string]string
}

func (r kvRecord) public(now int64) store.Record {
	rec := store.Record{Fields: r.fields, Version: r.version}
	if r.expires != 0 {
		rec.TTL = time.Duration(r.expires-now) * time.Millisecond
	}
	return rec
}

// nowSQL is the database clock in epoch ms: TTLs are measured on it, so
// every instance agrees when a record expires.
const nowSQL = `(extract(epoch FROM clock_timestamp()) * 1000)::bigint`

// Get returns the record at key. Errors: ErrNotFound, ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) Get(ctx context.Context, key string) (store.Record, error) {
	if err := store.CheckKVKey(key); err != nil {
		return store.Record{}, err
	}
	if err := s.ready(ctx); err != nil {
		return store.Record{}, err
	}
	var r kvRecord
	var body []byte
	var now int64
	err := s.pool.QueryRow(ctx, `SELECT version, expires, fields, now FROM nqd_kv, (SELECT `+nowSQL+` AS now) c
		WHERE key = $1 AND version > 0 AND (expires = 0 OR expires > now)`, key).Scan(&r.version, &r.expires, &body, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Record{}, errKVNotFound
	}
	if err != nil {
		return store.Record{}, dbErr(err)
	}
	if err := json.Unmarshal(body, &r.fields); err != nil {
		return store.Record{}, fmt.Errorf("pgstore: kv record %q: %w", key, err)
	}
	if r.fields == nil {
		r.fields = map[string]string{}
	}
	return r.public(now), nil
}

// GetField returns one field of the record at key. Errors: ErrNotFound,
// ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) GetField(ctx context.Context, key, field string) (string, error) {
	return store.FieldOf(ctx, s.Get, key, field)
}

// kvUpdate runs fn on the record at key (ok false when there is none, or it
// expired) under the row's lock and writes what fn returns: a record, or
// nil to delete. An error from fn rolls everything back.
func (s *Store) kvUpdate(ctx context.Context, key string, fn func(old kvRecord, ok bool, now int64) (*kvRecord, error)) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	return dbErr(s.write(ctx, func(tx pgx.Tx) error {
		// A missing key gets a placeholder row first, so there is always a
		// row to lock and two writers of a new key take turns.
		if _, err := tx.Exec(ctx, `INSERT INTO nqd_kv (key, version, expires, fields) VALUES ($1, 0, 0, $2)
			ON CONFLICT (key) DO NOTHING`, key, []byte("{}")); err != nil {
			return err
		}
		var old kvRecord
		var body []byte
		var now int64
		if err := tx.QueryRow(ctx, `SELECT version, expires, fields, `+nowSQL+` FROM nqd_kv WHERE key = $1 FOR UPDATE`, key).
			Scan(&old.version, &old.expires, &body, &now); err != nil {
			return err
		}
		ok := old.version > 0 && (old.expires == 0 || old.expires > now)
		if ok {
			if err := json.Unmarshal(body, &old.fields); err != nil {
				return fmt.Errorf("kv record %q: %w", key, err)
			}
		} else {
			old = kvRecord{}
		}
		if old.fields == nil {
			old.fields = map[string]string{}
		}
		r, err := fn(old, ok, now)
		if err != nil {
			return err
		}
		if r == nil {
			if _, err := tx.Exec(ctx, `DELETE FROM nqd_kv WHERE key = $1`, key); err != nil {
				return err
			}
		} else {
			body, err := json.Marshal(r.fields)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE nqd_kv SET version = $2, expires = $3, fields = $4 WHERE key = $1`,
				key, r.version, r.expires, body); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `DELETE FROM nqd_kv WHERE key IN (
			SELECT key FROM nqd_kv WHERE expires > 0 AND expires <= $1 AND key <> $2
			LIMIT $3 FOR UPDATE SKIP LOCKED)`, now, key, kvSweepLimit)
		return err
	}))
}

// Put replaces the record at key. Errors: ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) Put(ctx context.Context, key string, fields map[string]string, ttl time.Duration) (int64, error) {
	if err := store.CheckKVKey(key); err != nil {
		return 0, err
	}
	if err := store.CheckKVFields(fields, false); err != nil {
		return 0, err
	}
	if ttl < 0 {
		return 0, invalid("negative kv ttl")
	}
	var version int64
	err := s.kvUpdate(ctx, key, func(old kvRecord, _ bool, now int64) (*kvRecord, error) {
		r := &kvRecord{version: old.version + 1, fields: maps.Clone(fields)}
		if r.fields == nil {
			r.fields = map[string]string{}
		}
		if ttl > 0 {
			r.expires = now + max(ttl.Milliseconds(), 1)
		}
		version = r.version
		return r, nil
	})
	return version, err
}

// Delete removes the record at key. Errors: ErrNotFound, ErrInvalid,
// ErrClosed, ErrUnavailable.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := store.CheckKVKey(key); err != nil {
		return err
	}
	return s.kvUpdate(ctx, key, func(_ kvRecord, ok bool, _ int64) (*kvRecord, error) {
		if !ok {
			return nil, errKVNotFound
		}
		return nil, nil
	})
}

// SetFields merges fields into the record at key. Errors: ErrInvalid,
// ErrClosed, ErrUnavailable.
func (s *Store) SetFields(ctx context.Context, key string, fields map[string]string) (int64, error) {
	if err := store.CheckKVKey(key); err != nil {
		return 0, err
	}
	if err := store.CheckKVFields(fields, true); err != nil {
		return 0, err
	}
	var version int64
	err := s.kvUpdate(ctx, key, func(old kvRecord, _ bool, _ int64) (*kvRecord, error) {
		r, err := merge(key, old, fields)
		if err == nil {
			version = r.version
		}
		return r, err
	})
	return version, err
}

func merge(key string, old kvRecord, fields map[string]string) (*kvRecord, error) {
	merged, ok := store.MergeFields(old.fields, fields)
	if !ok {
		return nil, invalid("kv record %q would have over %d fields", key, store.MaxKVFields)
	}
	return &kvRecord{expires: old.expires, version: old.version + 1, fields: merged}, nil
}

// CompareAndSwap merges set into the record at key if cond holds. Errors:
// ErrNotFound, ErrConflict, ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) CompareAndSwap(ctx context.Context, key string, cond store.Condition, set map[string]string) (int64, error) {
	if err := store.CheckKVKey(key); err != nil {
		return 0, err
	}
	if !cond.Valid() {
		return 0, invalid("kv condition %+v", cond)
	}
	if err := store.CheckKVFields(set, true); err != nil {
		return 0, err
	}
	var version int64
	err := s.kvUpdate(ctx, key, func(old kvRecord, ok bool, _ int64) (*kvRecord, error) {
		if !ok {
			return nil, errKVNotFound
		}
		if !cond.Holds(old.version, old.fields) {
			return nil, errKVConflict
		}
		r, err := merge(key, old, set)
		if err == nil {
			version = r.version
		}
		return r, err
	})
	return version, err
}

// Scan returns the live records under q.Prefix that match q.Filter, in key
// order. Errors: ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) Scan(ctx context.Context, q store.ScanQuery) ([]store.KVEntry, error) {
	if !q.Valid() {
		return nil, invalid("kv scan %+v", q)
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	// The filter runs here rather than in SQL so that it compares exactly
	// as store.Filter.Match does on every backend.
	rows, err := s.pool.Query(ctx, `SELECT key, version, expires, fields, now
		FROM nqd_kv, (SELECT `+nowSQL+` AS now) c
		WHERE key >= $1 AND left(key, length($1)) = $1
		  AND version > 0 AND (expires = 0 OR expires > now)
		ORDER BY key`, q.Prefix)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []store.KVEntry
	for rows.Next() {
		var key string
		var r kvRecord
		var body []byte
		var now int64
		if err := rows.Scan(&key, &r.version, &r.expires, &body, &now); err != nil {
			return nil, dbErr(err)
		}
		if err := json.Unmarshal(body, &r.fields); err != nil {
			return nil, fmt.Errorf("pgstore: kv record %q: %w", key, err)
		}
		if r.fields == nil {
			r.fields = map[string]string{}
		}
		if q.Filter != nil && !q.Filter.Match(r.fields) {
			continue
		}
		out = append(out, store.KVEntry{Key: key, Record: r.public(now)})
		if q.Max > 0 && len(out) == q.Max {
			break
		}
	}
	return out, dbErr(rows.Err())
}
