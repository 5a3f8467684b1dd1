package store_test

import (
	"strings"
	"testing"

	"github.com/nqd-dev/nqd/store"
)

func TestFilterMatch(t *testing.T) {
	fields := map[string]string{"updated_at": "900", "state": "running", "neg": "-1.5", "empty": ""}
	tests := []struct {
		f    store.Filter
		want bool
	}{
		{store.Filter{Field: "updated_at", Op: store.OpLt, Value: "1000"}, true}, // as strings "900" > "1000"
		{store.Filter{Field: "updated_at", Op: store.OpGt, Value: "1000"}, false},
		{store.Filter{Field: "updated_at", Op: store.OpEq, Value: "900.0"}, true},
		{store.Filter{Field: "updated_at", Op: store.OpEq, Value: "900"}, true},
		{store.Filter{Field: "updated_at", Op: store.OpGt, Value: "abc"}, false}, // "900" < "abc" byte-wise
		{store.Filter{Field: "neg", Op: store.OpLt, Value: "0"}, true},
		{store.Filter{Field: "state", Op: store.OpEq, Value: "running"}, true},
		{store.Filter{Field: "state", Op: store.OpLt, Value: "s"}, true},
		{store.Filter{Field: "state", Op: store.OpGt, Value: "s"}, false},
		{store.Filter{Field: "empty", Op: store.OpEq, Value: ""}, true},
		{store.Filter{Field: "missing", Op: store.OpEq, Value: ""}, false},
		{store.Filter{Field: "missing", Op: store.OpLt, Value: "zzz"}, false},
		// NaN and infinities are not numbers here, so they order as text.
		{store.Filter{Field: "updated_at", Op: store.OpLt, Value: "NaN"}, true},
		{store.Filter{Field: "updated_at", Op: store.OpLt, Value: "Inf"}, true},
	}
	for _, tt := range tests {
		if got := tt.f.Match(fields); got != tt.want {
			t.Errorf("%+v.Match = %v, want %v", tt.f, got, tt.want)
		}
	}
}

func TestKVNames(t *testing.T) {
	for _, p := range []string{"", "a", "tasks.", "tasks.email-send.job_1", "A~b"} {
		if !store.ValidKVPrefix(p) {
			t.Errorf("ValidKVPrefix(%q) = false", p)
		}
	}
	for _, p := range []string{".", "_a", "-", "a:b", "a*", "a?", "a[", "a b", "a/b", "é", strings.Repeat("a", store.MaxKVPrefixLen+1)} {
		if store.ValidKVPrefix(p) {
			t.Errorf("ValidKVPrefix(%q) = true", p)
		}
	}
	for _, k := range []string{"", "_v", "a:b", "a/b", "a*"} {
		if store.ValidKVKey(k) || store.ValidKVField(k) {
			t.Errorf("%q passes as a key or field", k)
		}
	}
}

// FuzzFilterOrder checks that the comparison is a total order on any two
// values: exactly one of lt, eq, gt holds, and swapping sides flips it.
func FuzzFilterOrder(f *testing.F) {
	for _, s := range [][2]string{{"900", "1000"}, {"1e3", "1000"}, {"abc", "12"}, {"", "0"}, {"NaN", "NaN"}, {"-0", "0"}, {"0x10", "16"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		fields := map[string]string{"f": a}
		n := 0
		for _, op := range []string{store.OpLt, store.OpEq, store.OpGt} {
			if (store.Filter{Field: "f", Op: op, Value: b}).Match(fields) {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%q vs %q: %d of lt, eq, gt hold, want 1", a, b, n)
		}
		ab := (store.Filter{Field: "f", Op: store.OpLt, Value: b}).Match(fields)
		ba := (store.Filter{Field: "f", Op: store.OpGt, Value: a}).Match(map[string]string{"f": b})
		if ab != ba {
			t.Fatalf("%q < %q is %v but %q > %q is %v", a, b, ab, b, a, ba)
		}
	})
}

func TestConditionHolds(t *testing.T) {
	fields := map[string]string{"state": "idle", "empty": ""}
	tests := []struct {
		c    store.Condition
		want bool
	}{
		{store.Condition{Version: 3}, true},
		{store.Condition{Version: 2}, false},
		{store.Condition{Field: "state", Value: "idle"}, true},
		{store.Condition{Field: "state", Value: "busy"}, false},
		{store.Condition{Field: "empty", Value: ""}, true},
		{store.Condition{Field: "missing", Value: ""}, false}, // a missing field never matches
		{store.Condition{Field: "state", Value: "idle", Version: 3}, true},
		{store.Condition{Field: "state", Value: "idle", Version: 4}, false},
	}
	for _, tc := range tests {
		if got := tc.c.Holds(3, fields); got != tc.want {
			t.Errorf("%+v.Holds(3, %v) = %v, want %v", tc.c, fields, got, tc.want)
		}
	}
}

func TestMergeFields(t *testing.T) {
	old := map[string]string{"a": "1", "b": "2"}
	got, ok := store.MergeFields(old, map[string]string{"b": "3", "c": "4"})
	if !ok || len(got) != 3 || got["a"] != "1" || got["b"] != "3" || got["c"] != "4" {
		t.Errorf("MergeFields = %v, %v; want a=1 b=3 c=4, true", got, ok)
	}
	if old["b"] != "2" || len(old) != 2 {
		t.Errorf("MergeFields changed the old fields: %v", old)
	}
	if got, ok := store.MergeFields(nil, map[string]string{"a": "1"}); !ok || got["a"] != "1" {
		t.Errorf("MergeFields(nil, a=1) = %v, %v", got, ok)
	}
	full := map[string]string{}
	for i := range store.MaxKVFields {
		full["f"+strings.Repeat("x", i)] = "v"
	}
	if _, ok := store.MergeFields(full, map[string]string{"one": "more"}); ok {
		t.Errorf("MergeFields past MaxKVFields = ok")
	}
	if _, ok := store.MergeFields(full, map[string]string{"f": "overwrite"}); !ok {
		t.Errorf("MergeFields overwriting within MaxKVFields = not ok")
	}
}
