package reducers

import (
	"bytes"
	"encoding/json"
	"reflect"
)

// Delta is what changed between two states of one context, by field of their
// JSON form: named collections (steps, KV state, awaits, counted names) by key,
// the bounded lists (logs, emits) by entry id, and every other field whole.
type Delta struct {
	Changed map[string]Change     `json:"changed,omitempty"`
	Keyed   map[string]KeyedDelta `json:"keyed,omitempty"`
	Lists   map[string]ListDelta  `json:"lists,omitempty"`
}

// Change is a value before and after; an absent side was absent or null.
type Change struct {
	From json.RawMessage `json:"from,omitempty"`
	To   json.RawMessage `json:"to,omitempty"`
}

// KeyedDelta is what changed in a collection keyed by name.
type KeyedDelta struct {
	Added   map[string]json.RawMessage `json:"added,omitempty"`
	Removed map[string]json.RawMessage `json:"removed,omitempty"`
	Changed map[string]Change          `json:"changed,omitempty"`
}

// ListDelta is what changed in a list of entries with ids: the entries only
// the later state holds, oldest first, and the ids only the earlier one holds
// (entries the later state dropped to stay within its limits).
type ListDelta struct {
	Added   []json.RawMessage `json:"added,omitempty"`
	Removed []string          `json:"removed,omitempty"`
}

// Empty reports whether the states were equal.
func (d Delta) Empty() bool { return len(d.Changed)+len(d.Keyed)+len(d.Lists) == 0 }

var (
	keyedFields = map[string]bool{"steps": true, "state": true, "awaits": true, "emitted": true, "kinds": true}
	listFields  = map[string]bool{"logs": true, "emits": true}
)

// Diff returns what changed from a to b, typically the same context at two
// positions (the API's state/diff?from=&to=). A nil a or b stands for a state
// with nothing in it. States of two reducers give ErrStateType.
func Diff(a, b State) (Delta, error) {
	if a != nil && b != nil && reflect.TypeOf(a) != reflect.TypeOf(b) {
		return Delta{}, ErrStateType
	}
	from, err := fields(a)
	if err != nil {
		return Delta{}, err
	}
	to, err := fields(b)
	if err != nil {
		return Delta{}, err
	}
	var d Delta
	for name := range union(from, to) {
		x, y := from[name], to[name]
		if bytes.Equal(x, y) {
			continue
		}
		switch {
		case keyedFields[name]:
			if kd := diffKeyed(x, y); len(kd.Added)+len(kd.Removed)+len(kd.Changed) > 0 {
				d.Keyed = put(d.Keyed, name, kd)
			}
		case listFields[name]:
			if ld := diffList(x, y); len(ld.Added)+len(ld.Removed) > 0 {
				d.Lists = put(d.Lists, name, ld)
			}
		default:
			d.Changed = put(d.Changed, name, Change{From: x, To: y})
		}
	}
	return d, nil
}

func fields(s State) (map[string]json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	if s == nil || reflect.ValueOf(s).IsNil() {
		return m, nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, v := range m {
		if bytes.Equal(v, []byte("null")) {
			delete(m, k)
		}
	}
	return m, nil
}

func union[V any](a, b map[string]V) map[string]bool {
	u := make(map[string]bool, len(a)+len(b))
	for k := range a {
		u[k] = true
	}
	for k := range b {
		u[k] = true
	}
	return u
}

func put[V any](m map[string]V, k string, v V) map[string]V {
	if m == nil {
		m = map[string]V{}
	}
	m[k] = v
	return m
}

// diffKeyed compares two JSON objects key by key. Both were written by
// encoding/json from compacted values, so equal values are equal bytes.
func diffKeyed(x, y json.RawMessage) KeyedDelta {
	var a, b map[string]json.RawMessage
	_ = json.Unmarshal(orEmpty(x, "{}"), &a)
	_ = json.Unmarshal(orEmpty(y, "{}"), &b)
	var d KeyedDelta
	for k := range union(a, b) {
		va, inA := a[k]
		vb, inB := b[k]
		switch {
		case !inA:
			d.Added = put(d.Added, k, vb)
		case !inB:
			d.Removed = put(d.Removed, k, va)
		case !bytes.Equal(va, vb):
			d.Changed = put(d.Changed, k, Change{From: va, To: vb})
		}
	}
	return d
}

func diffList(x, y json.RawMessage) ListDelta {
	var a, b []json.RawMessage
	_ = json.Unmarshal(orEmpty(x, "[]"), &a)
	_ = json.Unmarshal(orEmpty(y, "[]"), &b)
	inA := make(map[string]bool, len(a))
	for _, e := range a {
		inA[entryID(e)] = true
	}
	var d ListDelta
	inB := make(map[string]bool, len(b))
	for _, e := range b {
		id := entryID(e)
		inB[id] = true
		if !inA[id] {
			d.Added = append(d.Added, e)
		}
	}
	for _, e := range a {
		if id := entryID(e); !inB[id] {
			d.Removed = append(d.Removed, id)
		}
	}
	return d
}

func entryID(e json.RawMessage) string {
	var v struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(e, &v)
	return v.ID
}

func orEmpty(b json.RawMessage, empty string) []byte {
	if len(b) == 0 {
		return []byte(empty)
	}
	return b
}
