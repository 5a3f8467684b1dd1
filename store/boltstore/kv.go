package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/nqd-dev/nqd/store"
)

// The KV records of store.KV live in two buckets of their own (created on
// first write):
//
//	kv/<key>                   expiry ms (0: none), version, then the fields as JSON
//	kvexp/<expiry ms><key>     nothing: the records with a TTL, soonest first
//
// An expired record is invisible to reads at once (Options.Now decides) and
// removed by the next writes: each write deletes up to sweepLimit records
// that have expired, the way expired idempotency records go.

var (
	bKV    = []byte("kv")
	bKVExp = []byte("kvexp")
)

const kvHeaderLen = 16

type kvRecord struct {
	expiry  int64 // epoch ms; 0: never
	version int64
	fields  map[string]string
}

func encodeKV(r kvRecord) ([]byte, error) {
	body, err := json.Marshal(r.fields)
	if err != nil {
		return nil, err
	}
	b := make([]byte, kvHeaderLen, kvHeaderLen+len(body))
	binary.BigEndian.PutUint64(b, uint64(r.expiry))
	binary.BigEndian.PutUint64(b[8:], uint64(r.version))
	return append(b, body...), nil
}

func decodeKV(b []byte) (kvRecord, error) {
	if len(b) < kvHeaderLen {
		return kvRecord{}, fmt.Errorf("boltstore: kv record of %d bytes", len(b))
	}
	r := kvRecord{
		expiry:  int64(binary.BigEndian.Uint64(b)),
		version: int64(binary.BigEndian.Uint64(b[8:])),
	}
	if err := json.Unmarshal(b[kvHeaderLen:], &r.fields); err != nil {
		return kvRecord{}, fmt.Errorf("boltstore: kv record: %w", err)
	}
	if r.fields == nil {
		r.fields = map[string]string{}
	}
	return r, nil
}

func (r kvRecord) live(now int64) bool { return r.expiry == 0 || r.expiry > now }

func (r kvRecord) public(now int64) store.Record {
	rec := store.Record{Fields: r.fields, Version: r.version}
	if r.expiry != 0 {
		rec.TTL = time.Duration(r.expiry-now) * time.Millisecond
	}
	return rec
}

func expKey(expiry int64, key string) []byte {
	return append(binary.BigEndian.AppendUint64(nil, uint64(expiry)), key...)
}

func (s *Store) nowMS() int64 { return s.opts.Now().UnixMilli() }

// kvErr lets the KV sentinels out of a transaction unchanged; dbErr takes
// the rest.
func kvErr(err error) error {
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
		return err
	}
	return dbErr(err)
}

var (
	errKVNotFound = fmt.Errorf("boltstore: kv: %w", store.ErrNotFound)
	errKVConflict = fmt.Errorf("boltstore: kv: %w", store.ErrConflict)
)

// readKV returns the live record at key in a read transaction, or
// errKVNotFound.
func readKV(tx *bolt.Tx, key string, now int64) (kvRecord, error) {
	b := tx.Bucket(bKV)
	if b == nil {
		return kvRecord{}, errKVNotFound
	}
	v := b.Get([]byte(key))
	if v == nil {
		return kvRecord{}, errKVNotFound
	}
	r, err := decodeKV(v)
	if err != nil {
		return kvRecord{}, err
	}
	if !r.live(now) {
		return kvRecord{}, errKVNotFound
	}
	return r, nil
}

// kvTx is a write transaction on the KV buckets.
type kvTx struct {
	recs, exp *bolt.Bucket
	now       int64
}

// kvUpdate runs fn in a write transaction after sweeping expired records.
func (s *Store) kvUpdate(ctx context.Context, fn func(t kvTx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.nowMS()
	return kvErr(s.db.Update(func(tx *bolt.Tx) error {
		recs, err := tx.CreateBucketIfNotExists(bKV)
		if err != nil {
			return err
		}
		exp, err := tx.CreateBucketIfNotExists(bKVExp)
		if err != nil {
			return err
		}
		t := kvTx{recs: recs, exp: exp, now: now}
		if err := t.sweep(); err != nil {
			return err
		}
		return fn(t)
	}))
}

// sweep deletes up to sweepLimit expired records, so expired records do not
// pile up in a file that is only written.
func (t kvTx) sweep() error {
	c := t.exp.Cursor()
	var done [][]byte
	for k, _ := c.First(); k != nil && len(done) < sweepLimit; k, _ = c.Next() {
		if int64(binary.BigEndian.Uint64(k)) > t.now {
			break
		}
		done = append(done, bytes.Clone(k))
	}
	for _, k := range done {
		if err := t.exp.Delete(k); err != nil {
			return err
		}
		key := k[8:]
		if v := t.recs.Get(key); v != nil {
			if r, err := decodeKV(v); err == nil && !r.live(t.now) {
				if err := t.recs.Delete(key); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// get returns the live record at key; an expired one is deleted.
func (t kvTx) get(key string) (kvRecord, bool, error) {
	v := t.recs.Get([]byte(key))
	if v == nil {
		return kvRecord{}, false, nil
	}
	r, err := decodeKV(v)
	if err != nil {
		return kvRecord{}, false, err
	}
	if !r.live(t.now) {
		return kvRecord{}, false, t.remove(key, r)
	}
	return r, true, nil
}

func (t kvTx) remove(key string, old kvRecord) error {
	if old.expiry != 0 {
		if err := t.exp.Delete(expKey(old.expiry, key)); err != nil {
			return err
		}
	}
	return t.recs.Delete([]byte(key))
}

// put stores r at key in place of old (zero when there was none).
func (t kvTx) put(key string, old, r kvRecord) error {
	if old.expiry != 0 && old.expiry != r.expiry {
		if err := t.exp.Delete(expKey(old.expiry, key)); err != nil {
			return err
		}
	}
	if r.expiry != 0 {
		if err := t.exp.Put(expKey(r.expiry, key), nil); err != nil {
			return err
		}
	}
	v, err := encodeKV(r)
	if err != nil {
		return err
	}
	return t.recs.Put([]byte(key), v)
}

// Get returns the record at key. Errors: ErrNotFound, ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) Get(ctx context.Context, key string) (store.Record, error) {
	if err := store.CheckKVKey(key); err != nil {
		return store.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.Record{}, err
	}
	now := s.nowMS()
	var r kvRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		r, err = readKV(tx, key, now)
		return err
	})
	if err != nil {
		return store.Record{}, kvErr(err)
	}
	return r.public(now), nil
}

// GetField returns one field of the record at key. Errors: ErrNotFound,
// ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) GetField(ctx context.Context, key, field string) (string, error) {
	return store.FieldOf(ctx, s.Get, key, field)
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
	err := s.kvUpdate(ctx, func(t kvTx) error {
		old, _, err := t.get(key)
		if err != nil {
			return err
		}
		r := kvRecord{version: old.version + 1, fields: maps.Clone(fields)}
		if r.fields == nil {
			r.fields = map[string]string{}
		}
		if ttl > 0 {
			// A TTL under a millisecond still expires: Redis's PEXPIRE
			// cannot hold less either.
			r.expiry = t.now + max(ttl.Milliseconds(), 1)
		}
		version = r.version
		return t.put(key, old, r)
	})
	return version, err
}

// Delete removes the record at key. Errors: ErrNotFound, ErrInvalid,
// ErrClosed, ErrUnavailable.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := store.CheckKVKey(key); err != nil {
		return err
	}
	return s.kvUpdate(ctx, func(t kvTx) error {
		old, ok, err := t.get(key)
		if err != nil {
			return err
		}
		if !ok {
			return errKVNotFound
		}
		return t.remove(key, old)
	})
}

// SetFields writes fields into the record at key, creating it if needed.
// Errors: ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) SetFields(ctx context.Context, key string, fields map[string]string) (int64, error) {
	if err := store.CheckKVKey(key); err != nil {
		return 0, err
	}
	if err := store.CheckKVFields(fields, true); err != nil {
		return 0, err
	}
	var version int64
	err := s.kvUpdate(ctx, func(t kvTx) error {
		old, _, err := t.get(key)
		if err != nil {
			return err
		}
		version, err = t.merge(key, old, fields)
		return err
	})
	return version, err
}

// merge writes fields over old's, keeping its expiry, unless the record
// would grow past the field limit.
func (t kvTx) merge(key string, old kvRecord, fields map[string]string) (int64, error) {
	merged, ok := store.MergeFields(old.fields, fields)
	if !ok {
		return 0, invalid("kv record %q would have over %d fields", key, store.MaxKVFields)
	}
	r := kvRecord{expiry: old.expiry, version: old.version + 1, fields: merged}
	return r.version, t.put(key, old, r)
}

// CompareAndSwap writes set into the record at key if cond holds. Errors:
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
	err := s.kvUpdate(ctx, func(t kvTx) error {
		old, ok, err := t.get(key)
		if err != nil {
			return err
		}
		if !ok {
			return errKVNotFound
		}
		if !cond.Holds(old.version, old.fields) {
			return errKVConflict
		}
		version, err = t.merge(key, old, set)
		return err
	})
	return version, err
}

// Scan returns the records under q.Prefix that match q.Filter, in key order.
// Errors: ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) Scan(ctx context.Context, q store.ScanQuery) ([]store.KVEntry, error) {
	if !q.Valid() {
		return nil, invalid("kv scan %+v", q)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := s.nowMS()
	var out []store.KVEntry
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bKV)
		if b == nil {
			return nil
		}
		prefix := []byte(q.Prefix)
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			r, err := decodeKV(v)
			if err != nil {
				return err
			}
			if !r.live(now) || q.Filter != nil && !q.Filter.Match(r.fields) {
				continue
			}
			out = append(out, store.KVEntry{Key: string(k), Record: r.public(now)})
			if q.Max > 0 && len(out) == q.Max {
				return nil
			}
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, kvErr(err)
	}
	return out, nil
}
