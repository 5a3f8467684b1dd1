package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/store"
)

// The KV records of store.KV are one hash each:
//
//	<p>:_kv:<key>   hash: the record's fields, plus _v = its version; PEXPIRE holds its TTL
//
// on the shard of <key> (see shards.go).
//
// "_kv" cannot be a context type (types start with a letter), so no client's
// context stream, index or the engine's keys can share a name with a record,
// and a scan's MATCH pattern sees records only. Keys, field names and scan
// prefixes hold none of ':', '*', '?', '[' or ']' (store.ValidKVKey), so a
// client string can neither leave the namespace nor widen a pattern.
//
// Put, SetFields and CompareAndSwap are one Lua script each
// (scripts/kv_*.lua), so the version moves with every write; Get reads the
// hash and its TTL in one MULTI; Scan walks SCAN MATCH and reads each batch
// of keys in one pipeline.

var (
	//go:embed scripts/kv_put.lua
	kvPutLua string
	//go:embed scripts/kv_set.lua
	kvSetLua string
	//go:embed scripts/kv_cas.lua
	kvCASLua string

	kvPutScript = redis.NewScript(kvPutLua)
	kvSetScript = redis.NewScript(kvSetLua)
	kvCASScript = redis.NewScript(kvCASLua)
)

// versionField holds a record's version in its hash; store.ValidKVField
// refuses names that start with '_'.
const versionField = "_v"

// scanCount is the SCAN batch size: the keys read per pipeline.
const scanCount = 500

func (sh *shard) kvPrefix() string        { return sh.prefix + ":_kv:" }
func (sh *shard) kvKey(key string) string { return sh.kvPrefix() + key }

func checkKV(op, key string, fields map[string]string, needFields bool) error {
	err := store.CheckKVKey(key)
	if err == nil {
		err = store.CheckKVFields(fields, needFields)
	}
	if err != nil {
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	return nil
}

// pairs flattens fields into script arguments after head.
func pairs(head []any, fields map[string]string) []any {
	args := slices.Grow(head, 2*len(fields))
	for k, v := range fields {
		args = append(args, k, v)
	}
	return args
}

// toRecord splits a hash into fields and version; an empty hash is no record.
func toRecord(h map[string]string, pttl time.Duration) (store.Record, bool) {
	if len(h) == 0 {
		return store.Record{}, false
	}
	r := store.Record{Fields: make(map[string]string, len(h))}
	for k, v := range h {
		if k == versionField {
			r.Version, _ = strconv.ParseInt(v, 10, 64)
			continue
		}
		r.Fields[k] = v
	}
	// PTTL answers -1 (no TTL) or -2 (no key) as negative durations.
	if pttl > 0 {
		r.TTL = pttl
	}
	return r, true
}

// Get returns the record at key. Errors: store.ErrNotFound, store.ErrInvalid,
// store.ErrUnavailable, store.ErrClosed.
func (s *Store) Get(ctx context.Context, key string) (store.Record, error) {
	if err := s.checkOpen("kv get"); err != nil {
		return store.Record{}, err
	}
	if err := checkKV("kv get", key, nil, false); err != nil {
		return store.Record{}, err
	}
	var all *redis.MapStringStringCmd
	var ttl *redis.DurationCmd
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		all = p.HGetAll(ctx, s.on(key).kvKey(key))
		ttl = p.PTTL(ctx, s.on(key).kvKey(key))
		return nil
	})
	if err != nil {
		return store.Record{}, mapErr(ctx, "kv get", err)
	}
	r, ok := toRecord(all.Val(), ttl.Val())
	if !ok {
		return store.Record{}, fmt.Errorf("redisstore: kv get %s: %w", key, store.ErrNotFound)
	}
	return r, nil
}

// GetField returns one field of the record at key. Errors:
// store.ErrNotFound, store.ErrInvalid, store.ErrUnavailable, store.ErrClosed.
func (s *Store) GetField(ctx context.Context, key, field string) (string, error) {
	if err := s.checkOpen("kv get field"); err != nil {
		return "", err
	}
	if err := checkKV("kv get field", key, nil, false); err != nil {
		return "", err
	}
	if !store.ValidKVField(field) {
		return "", invalid("kv get field", "field %q", field)
	}
	v, err := s.client.HGet(ctx, s.on(key).kvKey(key), field).Result()
	if err != nil {
		return "", mapErr(ctx, "kv get field", err)
	}
	return v, nil
}

// Put replaces the record at key. Errors: store.ErrInvalid,
// store.ErrUnavailable, store.ErrClosed.
func (s *Store) Put(ctx context.Context, key string, fields map[string]string, ttl time.Duration) (int64, error) {
	if err := s.checkOpen("kv put"); err != nil {
		return 0, err
	}
	if err := checkKV("kv put", key, fields, false); err != nil {
		return 0, err
	}
	if ttl < 0 {
		return 0, invalid("kv put", "negative ttl")
	}
	ms := int64(0)
	if ttl > 0 {
		ms = max(ttl.Milliseconds(), 1)
	}
	v, err := s.on(key).pipe.call(ctx, kvPutScript, []string{s.on(key).kvKey(key)}, pairs([]any{ms}, fields)).Int64()
	if err != nil {
		return 0, mapWriteErr(ctx, "kv put", err)
	}
	return v, nil
}

// Delete removes the record at key. Errors: store.ErrNotFound,
// store.ErrInvalid, store.ErrUnavailable, store.ErrClosed.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.checkOpen("kv delete"); err != nil {
		return err
	}
	if err := checkKV("kv delete", key, nil, false); err != nil {
		return err
	}
	n, err := s.client.Del(ctx, s.on(key).kvKey(key)).Result()
	if err != nil {
		return mapErr(ctx, "kv delete", err)
	}
	if n == 0 {
		return fmt.Errorf("redisstore: kv delete %s: %w", key, store.ErrNotFound)
	}
	return nil
}

// SetFields writes fields into the record at key, creating it if needed.
// Errors: store.ErrInvalid, store.ErrUnavailable, store.ErrClosed.
func (s *Store) SetFields(ctx context.Context, key string, fields map[string]string) (int64, error) {
	if err := s.checkOpen("kv set fields"); err != nil {
		return 0, err
	}
	if err := checkKV("kv set fields", key, fields, true); err != nil {
		return 0, err
	}
	v, err := s.on(key).pipe.call(ctx, kvSetScript, []string{s.on(key).kvKey(key)}, pairs([]any{store.MaxKVFields}, fields)).Int64()
	if err != nil {
		return 0, mapWriteErr(ctx, "kv set fields", err)
	}
	if v == -2 {
		return 0, invalid("kv set fields", "record %q would have over %d fields", key, store.MaxKVFields)
	}
	return v, nil
}

// CompareAndSwap writes set into the record at key if cond holds. Errors:
// store.ErrNotFound, store.ErrConflict, store.ErrInvalid,
// store.ErrUnavailable, store.ErrClosed.
func (s *Store) CompareAndSwap(ctx context.Context, key string, cond store.Condition, set map[string]string) (int64, error) {
	if err := s.checkOpen("kv compare and swap"); err != nil {
		return 0, err
	}
	if err := checkKV("kv compare and swap", key, set, true); err != nil {
		return 0, err
	}
	if !cond.Valid() {
		return 0, invalid("kv compare and swap", "condition %+v", cond)
	}
	head := []any{cond.Field, cond.Value, cond.Version, store.MaxKVFields}
	v, err := s.on(key).pipe.call(ctx, kvCASScript, []string{s.on(key).kvKey(key)}, pairs(head, set)).Int64()
	if err != nil {
		return 0, mapWriteErr(ctx, "kv compare and swap", err)
	}
	switch v {
	case 0:
		return 0, fmt.Errorf("redisstore: kv compare and swap %s: %w", key, store.ErrConflict)
	case -1:
		return 0, fmt.Errorf("redisstore: kv compare and swap %s: %w", key, store.ErrNotFound)
	case -2:
		return 0, invalid("kv compare and swap", "record %q would have over %d fields", key, store.MaxKVFields)
	}
	return v, nil
}

// Scan returns the records under q.Prefix that match q.Filter, in key order.
// It filters in nqd, not in Redis: a sweeper may read every record under a
// prefix once a minute, and a script walking them would block Redis for as
// long. Errors: store.ErrInvalid, store.ErrUnavailable, store.ErrClosed.
func (s *Store) Scan(ctx context.Context, q store.ScanQuery) ([]store.KVEntry, error) {
	if err := s.checkOpen("kv scan"); err != nil {
		return nil, err
	}
	if !q.Valid() {
		return nil, invalid("kv scan", "query %+v", q)
	}
	var out []store.KVEntry
	// Each shard holds the records of its keys: a scan walks them all.
	for _, sh := range s.shards {
		base := sh.kvPrefix()
		// Validation leaves no glob character in the prefix or the key prefix.
		pattern := base + q.Prefix + "*"
		node, err := s.keyspace(ctx, sh)
		if err != nil {
			return nil, mapErr(ctx, "kv scan", err)
		}
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, pattern, scanCount).Result()
			if err != nil {
				return nil, mapErr(ctx, "kv scan", err)
			}
			found, err := s.readBatch(ctx, base, keys, q.Filter)
			if err != nil {
				return nil, err
			}
			out = append(out, found...)
			if next == 0 || q.Max > 0 && len(out) >= q.Max && len(s.shards) == 1 {
				break
			}
			cursor = next
		}
	}
	slices.SortFunc(out, func(a, b store.KVEntry) int { return strings.Compare(a.Key, b.Key) })
	// SCAN may return a key twice; a record counts once.
	out = slices.CompactFunc(out, func(a, b store.KVEntry) bool { return a.Key == b.Key })
	if q.Max > 0 && len(out) > q.Max {
		out = out[:q.Max]
	}
	return out, nil
}

// readBatch reads the records at keys in one pipeline and keeps those that
// still exist and match f.
func (s *Store) readBatch(ctx context.Context, base string, keys []string, f *store.Filter) ([]store.KVEntry, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	type read struct {
		key  string
		all  *redis.MapStringStringCmd
		pttl *redis.DurationCmd
	}
	reads := make([]read, 0, len(keys))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			key := strings.TrimPrefix(k, base)
			if !store.ValidKVKey(key) {
				continue
			}
			reads = append(reads, read{key: key, all: p.HGetAll(ctx, k), pttl: p.PTTL(ctx, k)})
		}
		return nil
	})
	if err != nil {
		return nil, mapErr(ctx, "kv scan", err)
	}
	var out []store.KVEntry
	for _, r := range reads {
		// A record that expired or went since SCAN named it reads empty.
		rec, ok := toRecord(r.all.Val(), r.pttl.Val())
		if !ok || f != nil && !f.Match(rec.Fields) {
			continue
		}
		out = append(out, store.KVEntry{Key: r.key, Record: rec})
	}
	return out, nil
}
