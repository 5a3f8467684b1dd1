package store

import (
	"context"
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nqd-dev/nqd/event"
)

// This file is the KV state store: small records of named fields with an
// optional TTL, field-level writes, compare-and-swap on one key and a
// filtered scan by key prefix. Streams carry signals, KV carries the current
// state workers and the sweeper ask about ("which jobs are stuck?"). A
// backend offers it beside Store; the conformance scenarios are in storetest
// (RunAll).
//
// Field values are strings: the Redis backend stores bytes in hash fields,
// and a string is the Go form of those bytes that also travels as JSON.
// Numbers (such as an updated_at in epoch ms) are written in decimal; Filter
// compares them as numbers.

// KV limits. They keep every record small enough to read in one command and
// every name safe to put in a Redis key.
const (
	// MaxKVFields is the most fields one record, or one write, may have.
	MaxKVFields = 256
	// MaxKVValueLen is the longest field value in bytes; larger values belong
	// in an object store with a reference here (a claim check).
	MaxKVValueLen = 64 << 10
	// MaxKVPrefixLen is the longest scan prefix, the longest key.
	MaxKVPrefixLen = 128
)

// Filter operators.
const (
	OpEq = "eq"
	OpLt = "lt"
	OpGt = "gt"
)

// Record is one KV record.
type Record struct {
	Fields map[string]string
	// Version counts the writes since the record was created, starting at 1.
	// A record deleted (or expired) and created again starts over, so a
	// version is only meaningful while the record lives.
	Version int64
	// TTL is the time left before the record expires; 0 means never.
	TTL time.Duration
}

// KVEntry is a record found by a scan.
type KVEntry struct {
	Key    string
	Record Record
}

// Condition is what a compare-and-swap requires of the stored record. At
// least one part is set; every part that is set must hold.
type Condition struct {
	// Field, when set, must hold exactly Value (a compare-and-swap on one
	// field); a missing field never matches.
	Field string
	Value string
	// Version, when positive, must be the record's version.
	Version int64
}

// Holds reports whether a record at version with fields meets c. The Redis
// backend checks the same in store/redisstore/scripts/kv_cas.lua.
func (c Condition) Holds(version int64, fields map[string]string) bool {
	if c.Version > 0 && version != c.Version {
		return false
	}
	if c.Field != "" {
		v, ok := fields[c.Field]
		return ok && v == c.Value
	}
	return true
}

// MergeFields is fields written over old's, a new map, and whether the
// result stays within MaxKVFields: what SetFields and CompareAndSwap store.
func MergeFields(old, fields map[string]string) (map[string]string, bool) {
	out := make(map[string]string, len(old)+len(fields))
	maps.Copy(out, old)
	maps.Copy(out, fields)
	return out, len(out) <= MaxKVFields
}

// Filter selects scanned records by one field. A record without the field
// never matches.
type Filter struct {
	Field string
	Op    string // OpEq, OpLt or OpGt
	Value string
}

// ScanQuery selects records by key prefix and, optionally, a filter.
type ScanQuery struct {
	Prefix string  // "" scans every record
	Filter *Filter // nil matches every record
	// Max caps the records returned; 0 means no cap. Which of more matching
	// records a capped scan returns is up to the backend.
	Max int
}

// KV is the state store contract. Keys and field names follow
// ValidKVKey and ValidKVField; a write that breaks a limit changes nothing.
type KV interface {
	// Get returns the record at key. Errors: ErrNotFound (none, or expired),
	// ErrInvalid, ErrUnavailable, ErrClosed.
	Get(ctx context.Context, key string) (Record, error)

	// Put replaces the record at key with fields, expiring after ttl (0
	// means never), and returns its version. Errors: ErrInvalid,
	// ErrUnavailable, ErrClosed.
	Put(ctx context.Context, key string, fields map[string]string, ttl time.Duration) (int64, error)

	// Delete removes the record at key. Errors: ErrNotFound, ErrInvalid,
	// ErrUnavailable, ErrClosed.
	Delete(ctx context.Context, key string) error

	// GetField returns one field of the record at key. Errors: ErrNotFound
	// (no record or no such field), ErrInvalid, ErrUnavailable, ErrClosed.
	GetField(ctx context.Context, key, field string) (string, error)

	// SetFields writes fields (at least one) into the record at key, keeping
	// its other fields and its TTL, creating it without a TTL if it does not
	// exist, and returns the new version. Setting one field is a call with
	// one field. Errors: ErrInvalid, ErrUnavailable, ErrClosed.
	SetFields(ctx context.Context, key string, fields map[string]string) (int64, error)

	// CompareAndSwap writes set (at least one field) into the record at key
	// only if cond holds, atomically, and returns the new version: of many
	// concurrent swaps from one state, exactly one wins. Errors: ErrNotFound
	// (no record), ErrConflict (cond does not hold), ErrInvalid,
	// ErrUnavailable, ErrClosed.
	CompareAndSwap(ctx context.Context, key string, cond Condition, set map[string]string) (int64, error)

	// Scan returns the records whose keys start with q.Prefix and that match
	// q.Filter, in key order. It reads every record under the prefix, so it
	// suits periodic sweeps, not a request's hot path. Errors: ErrInvalid,
	// ErrUnavailable, ErrClosed.
	Scan(ctx context.Context, q ScanQuery) ([]KVEntry, error)

	// Ping checks that the backend is reachable. Errors: ErrUnavailable.
	Ping(ctx context.Context) error
}

// FieldOf is GetField for a backend that reads a record whole: field's
// value in the record get returns for key. Errors: ErrInvalid (a bad
// field), ErrNotFound (no record, or none of that field) and get's.
func FieldOf(ctx context.Context, get func(context.Context, string) (Record, error), key, field string) (string, error) {
	if !ValidKVField(field) {
		return "", fmt.Errorf("%w: kv field %q", ErrInvalid, field)
	}
	rec, err := get(ctx, key)
	if err != nil {
		return "", err
	}
	v, ok := rec.Fields[field]
	if !ok {
		return "", fmt.Errorf("kv field %q: %w", field, ErrNotFound)
	}
	return v, nil
}

// ReservedKVPrefix starts the keys of nqd's own records, such as the
// sweeper's lease and the worker registry's records. nqd writes them through
// the store; the public KV routes refuse to, so that no token can forge them.
const ReservedKVPrefix = "nqd."

// ReservedKVKey reports whether key is one of nqd's own (ReservedKVPrefix).
func ReservedKVKey(key string) bool { return strings.HasPrefix(key, ReservedKVPrefix) }

// ValidKVKey reports whether key may name a record. Keys follow the context
// id rule of event/names.go (dots separate segments, as in
// tasks.email-send.job_123): no ':', '/', glob character or whitespace can
// reach a Redis key or a URL path.
func ValidKVKey(key string) bool { return event.ValidName(key) }

// ValidKVField reports whether name may name a field. Fields follow the same
// rule as keys, which leaves names starting with '_' to the backends.
func ValidKVField(name string) bool { return event.ValidName(name) }

// ValidKVPrefix reports whether p may start a scan: empty, or the start of a
// valid key.
func ValidKVPrefix(p string) bool {
	if p == "" {
		return true
	}
	if len(p) > MaxKVPrefixLen {
		return false
	}
	for i := 0; i < len(p); i++ {
		if !keyByte(p[i]) {
			return false
		}
	}
	c := p[0]
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func keyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '~' || c == '-'
}

// ValidFields reports whether fields may be written: at most MaxKVFields,
// valid names, values of at most MaxKVValueLen bytes.
func ValidFields(fields map[string]string) bool {
	if len(fields) > MaxKVFields {
		return false
	}
	for name, v := range fields {
		if !ValidKVField(name) || len(v) > MaxKVValueLen {
			return false
		}
	}
	return true
}

// Valid reports whether the condition can be checked: it names a valid field
// or a positive version, and its value fits the limits.
func (c Condition) Valid() bool {
	if c.Field == "" {
		return c.Version > 0 && c.Value == ""
	}
	return ValidKVField(c.Field) && len(c.Value) <= MaxKVValueLen && c.Version >= 0
}

// Valid reports whether the filter names a valid field and operator.
func (f Filter) Valid() bool {
	return ValidKVField(f.Field) && (f.Op == OpEq || f.Op == OpLt || f.Op == OpGt) && len(f.Value) <= MaxKVValueLen
}

// Valid reports whether the query can run.
func (q ScanQuery) Valid() bool {
	return ValidKVPrefix(q.Prefix) && q.Max >= 0 && (q.Filter == nil || q.Filter.Valid())
}

// Match reports whether fields pass the filter. When both the field's value
// and the filter's parse as finite numbers (strconv.ParseFloat) they compare as numbers
// (so "900" < "1000"); otherwise they compare byte-wise as strings.
func (f Filter) Match(fields map[string]string) bool {
	v, ok := fields[f.Field]
	if !ok {
		return false
	}
	c := compareValues(v, f.Value)
	switch f.Op {
	case OpEq:
		return c == 0
	case OpLt:
		return c < 0
	case OpGt:
		return c > 0
	}
	return false
}

func compareValues(a, b string) int {
	x, errA := strconv.ParseFloat(a, 64)
	y, errB := strconv.ParseFloat(b, 64)
	if errA == nil && errB == nil && finite(x) && finite(y) {
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func finite(x float64) bool { return !math.IsInf(x, 0) && !math.IsNaN(x) }

// CheckKVKey checks a KV call's key by the key rule. Errors wrap ErrInvalid.
func CheckKVKey(key string) error {
	if !ValidKVKey(key) {
		return fmt.Errorf("%w: kv key %q", ErrInvalid, key)
	}
	return nil
}

// CheckKVFields checks the fields a KV call writes (needOne: at least one) by
// the field rules and limits. Errors wrap ErrInvalid.
func CheckKVFields(fields map[string]string, needOne bool) error {
	if needOne && len(fields) == 0 {
		return fmt.Errorf("%w: kv write without fields", ErrInvalid)
	}
	if !ValidFields(fields) {
		return fmt.Errorf("%w: kv fields: a name breaks the key rule, a value is over %d bytes or there are over %d", ErrInvalid, MaxKVValueLen, MaxKVFields)
	}
	return nil
}
