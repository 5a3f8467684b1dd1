package jsonscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

var seeds = []string{
	`{}`, ` { "a" : 1 , "b":[1,2,{"c":null}] } `, `{"a":"x\"y\u00e9\\"}`, `{"a":-0.5e+3}`,
	`{"a":01}`, `{"a":1.}`, `{"a":"\x"}`, `{"a":tru}`, `{"a":1,}`, `{"a" 1}`, `{"a":1}x`, `[1]`,
	`{"a":"` + "\x01" + `"}`, `{"a":{"b":[true,false,null]},"c":"\ud83d\ude00"}`,
}

// FuzzObject checks that Object accepts exactly the objects encoding/json
// accepts and reports the members json.Unmarshal finds.
func FuzzObject(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var keys, vals [][]byte
		ok := Object(b, func(k, v []byte) bool {
			keys, vals = append(keys, k), append(vals, v)
			return true
		})
		// Deeper values than maxDepth are refused, and left to encoding/json.
		if Valid(b) != json.Valid(b) && bytes.Count(b, []byte("["))+bytes.Count(b, []byte("{")) < maxDepth {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", b, Valid(b), json.Valid(b))
		}
		var m map[string]json.RawMessage
		want := json.Unmarshal(b, &m) == nil && m != nil
		if ok != want {
			t.Fatalf("Object(%q) = %v, encoding/json says %v", b, ok, want)
		}
		if !ok {
			return
		}
		for i, k := range keys {
			var name string
			if err := json.Unmarshal(append(append([]byte{'"'}, k...), '"'), &name); err != nil {
				t.Fatalf("key %q: %v", k, err)
			}
			if !json.Valid(vals[i]) {
				t.Fatalf("value %q of %q is not valid JSON", vals[i], name)
			}
			if bytes.HasPrefix(vals[i], []byte("[")) {
				n := 0
				Array(vals[i], func(e []byte) bool { n++; return json.Valid(e) })
				var arr []json.RawMessage
				_ = json.Unmarshal(vals[i], &arr)
				if n != len(arr) {
					t.Fatalf("Array(%q) saw %d elements, want %d", vals[i], n, len(arr))
				}
			}
			if s, ok := String(vals[i]); ok {
				var want string
				if err := json.Unmarshal(vals[i], &want); err != nil || s != want {
					t.Fatalf("String(%q) = %q, want %q (%v)", vals[i], s, want, err)
				}
			}
			if n, ok := Int(vals[i]); ok {
				var want int
				if err := json.Unmarshal(vals[i], &want); err != nil || n != want {
					t.Fatalf("Int(%q) = %d, want %d (%v)", vals[i], n, want, err)
				}
			}
		}
	})
}

func TestFields(t *testing.T) {
	names := []string{"lease", "score"}
	for _, tc := range []struct {
		in   string
		ok   bool
		seen string // the names fn was called for, in order
	}{
		{`{"score":3,"input":{"lease":"inner"},"lease":"L"}`, true, "score,lease"},
		{`{"other":1}`, true, ""},
		{`{"Lease":"L"}`, false, ""},              // encoding/json would take it
		{`{"le\u0061se":"L"}`, false, ""},         // an escaped key
		{`{"score":1,"SCORE":2}`, false, "score"}, // stops at the folded one
		{`[1]`, false, ""},
		{`{"score":"x"}`, false, "score"}, // fn refused the value
	} {
		var seen []string
		ok := Fields([]byte(tc.in), names, func(i int, val []byte) bool {
			seen = append(seen, names[i])
			_, isInt := Int(val)
			return names[i] != "score" || isInt
		})
		if ok != tc.ok || strings.Join(seen, ",") != tc.seen {
			t.Errorf("Fields(%s) = %v after %q, want %v after %q", tc.in, ok, seen, tc.ok, tc.seen)
		}
	}
}
