package handlers

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// KV is the state store the /api/_kv routes serve; see store.KV, which any
// backend's store is.
type KV interface {
	Get(ctx context.Context, key string) (store.Record, error)
	Put(ctx context.Context, key string, fields map[string]string, ttl time.Duration) (int64, error)
	Delete(ctx context.Context, key string) error
	GetField(ctx context.Context, key, field string) (string, error)
	SetFields(ctx context.Context, key string, fields map[string]string) (int64, error)
	CompareAndSwap(ctx context.Context, key string, cond store.Condition, set map[string]string) (int64, error)
	Scan(ctx context.Context, q store.ScanQuery) ([]store.KVEntry, error)
}

// Scan pages: a scan reads every record under its prefix, so an answer is
// capped, and says when more matched.
const (
	defaultKVScan = 100
	maxKVScan     = 1000
)

// kvRecord is a record as the API shows it.
type kvRecord struct {
	Key     string            `json:"key"`
	Fields  map[string]string `json:"fields"`
	Version int64             `json:"version"`
	// TTLMs is the time left before the record expires; absent when it
	// never does.
	TTLMs int64 `json:"ttlMs,omitempty"`
}

func toKVRecord(key string, r store.Record) kvRecord {
	out := kvRecord{Key: key, Fields: r.Fields, Version: r.Version, TTLMs: r.TTL.Milliseconds()}
	if out.Fields == nil {
		out.Fields = map[string]string{}
	}
	if r.TTL > 0 && out.TTLMs == 0 {
		out.TTLMs = 1 // still alive, for less than a millisecond
	}
	return out
}

// kvWritten answers every write: the record's version after it.
type kvWritten struct {
	Key     string `json:"key"`
	Version int64  `json:"version"`
}

type kvPutRequest struct {
	Fields map[string]string `json:"fields" validate:"max=256,dive,keys,key_name,endkeys"`
	TTLMs  int64             `json:"ttlMs" validate:"gte=0"`
}

type kvFieldsRequest struct {
	Fields map[string]string `json:"fields" validate:"required,min=1,max=256,dive,keys,key_name,endkeys"`
}

// kvCASRequest is a compare-and-swap on a KV record: when field holds
// expected (and, if version is set, the record is at that version), set is
// written.
type kvCASRequest struct {
	Field    string            `json:"field" validate:"omitempty,key_name"`
	Expected *string           `json:"expected"`
	Version  int64             `json:"version" validate:"gte=0"`
	Set      map[string]string `json:"set" validate:"required,min=1,max=256,dive,keys,key_name,endkeys"`
}

func kvKey(r *http.Request) (string, error) {
	key := chi.URLParam(r, "key")
	if !store.ValidKVKey(key) {
		return "", invalidField("key", event.NameRule)
	}
	return key, nil
}

// kvWriteKey is kvKey for a write, which may not touch nqd's own records.
func kvWriteKey(r *http.Request) (string, error) {
	key, err := kvKey(r)
	if err == nil && store.ReservedKVKey(key) {
		err = &nqd.Error{Code: nqd.CodeForbidden, Message: fmt.Sprintf(
			"Keys starting with %q are nqd's own records (the sweeper's lease, the worker registry): the KV routes read them but do not write them.",
			store.ReservedKVPrefix)}
	}
	return key, err
}

func (a *API) getKV(w http.ResponseWriter, r *http.Request) error {
	key, err := kvKey(r)
	if err != nil {
		return err
	}
	rec, err := a.kv.Get(r.Context(), key)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, toKVRecord(key, rec))
	return nil
}

func (a *API) getKVField(w http.ResponseWriter, r *http.Request) error {
	key, err := kvKey(r)
	if err != nil {
		return err
	}
	field := chi.URLParam(r, "field")
	if !store.ValidKVField(field) {
		return invalidField("field", event.NameRule)
	}
	v, err := a.kv.GetField(r.Context(), key, field)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, map[string]string{"key": key, "field": field, "value": v})
	return nil
}

// putKV replaces the record; ttlMs 0 or absent keeps it until deleted.
func (a *API) putKV(w http.ResponseWriter, r *http.Request) error {
	key, err := kvWriteKey(r)
	if err != nil {
		return err
	}
	var req kvPutRequest
	if err := a.decodeKVBody(w, r, &req); err != nil {
		return err
	}
	v, err := a.kv.Put(r.Context(), key, req.Fields, time.Duration(req.TTLMs)*time.Millisecond)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, kvWritten{Key: key, Version: v})
	return nil
}

func (a *API) deleteKV(w http.ResponseWriter, r *http.Request) error {
	key, err := kvWriteKey(r)
	if err == nil {
		err = a.kv.Delete(r.Context(), key)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// setKVFields writes some fields, keeping the others and the TTL; it creates
// the record if there is none.
func (a *API) setKVFields(w http.ResponseWriter, r *http.Request) error {
	key, err := kvWriteKey(r)
	if err != nil {
		return err
	}
	var req kvFieldsRequest
	if err := a.decodeKVBody(w, r, &req); err != nil {
		return err
	}
	v, err := a.kv.SetFields(r.Context(), key, req.Fields)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, kvWritten{Key: key, Version: v})
	return nil
}

// casKV answers 409 when the condition does not hold and 404 when there is
// no record.
func (a *API) casKV(w http.ResponseWriter, r *http.Request) error {
	key, err := kvWriteKey(r)
	if err != nil {
		return err
	}
	var req kvCASRequest
	if err := a.decodeKVBody(w, r, &req); err != nil {
		return err
	}
	switch {
	case req.Field == "" && req.Version == 0:
		err = invalidField("field", "a swap needs field with expected, version, or both")
	case req.Field == "" && req.Expected != nil:
		err = invalidField("expected", "needs field")
	case req.Field != "" && req.Expected == nil:
		err = invalidField("expected", "required with field")
	}
	if err != nil {
		return err
	}
	cond := store.Condition{Field: req.Field, Version: req.Version}
	if req.Expected != nil {
		cond.Value = *req.Expected
	}
	v, err := a.kv.CompareAndSwap(r.Context(), key, cond, req.Set)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, kvWritten{Key: key, Version: v})
	return nil
}

func (a *API) decodeKVBody(w http.ResponseWriter, r *http.Request, v any) error {
	if err := checkJSONContent(r); err != nil {
		return err
	}
	return a.decodeBody(w, r, v)
}

type kvScanBody struct {
	Records []kvRecord `json:"records"`
	// More is true when further records matched than max allowed.
	More bool `json:"more"`
}

// scanKV lists the records under a key prefix, optionally those whose field
// compares eq, lt or gt to value (as numbers when both are numbers), in key
// order.
func (a *API) scanKV(w http.ResponseWriter, r *http.Request) error {
	qs := r.URL.Query()
	// No offset: a capped scan's records are the backend's choice, so
	// paging by position could skip or repeat records; a narrower prefix
	// or a larger max reads the rest.
	if err := onlyParams(qs, "prefix", "field", "op", "value", "max"); err != nil {
		return err
	}
	q := store.ScanQuery{Prefix: qs.Get("prefix")}
	if !store.ValidKVPrefix(q.Prefix) {
		return invalidField("prefix", "must be the start of a key: "+event.NameRule)
	}
	limit, err := intParam(qs, "max", defaultKVScan, 1, maxKVScan)
	if err != nil {
		return err
	}
	if field, op := qs.Get("field"), qs.Get("op"); field != "" || op != "" || qs.Has("value") {
		f := store.Filter{Field: field, Op: op, Value: qs.Get("value")}
		switch {
		case !store.ValidKVField(f.Field):
			err = invalidField("field", "a filter needs a field that "+event.NameRule)
		case f.Op != store.OpEq && f.Op != store.OpLt && f.Op != store.OpGt:
			err = invalidField("op", "must be eq, lt or gt")
		case len(f.Value) > store.MaxKVValueLen:
			err = invalidField("value", "at most 65536 bytes")
		}
		if err != nil {
			return err
		}
		q.Filter = &f
	}
	// One more than asked tells whether there are more.
	q.Max = limit + 1
	found, err := a.kv.Scan(r.Context(), q)
	if err != nil {
		return err
	}
	body := kvScanBody{Records: make([]kvRecord, 0, min(len(found), limit))}
	if len(found) > limit {
		found, body.More = found[:limit], true
	}
	for _, e := range found {
		body.Records = append(body.Records, toKVRecord(e.Key, e.Record))
	}
	writeJSON(w, r, http.StatusOK, body)
	return nil
}
