package redisstore

import (
	"errors"
	"strings"
	"testing"
)

// TestParseXRange reads the reply shapes XRANGE may take: RESP2 and RESP3
// arrays, fields as a RESP3 map, an empty and a null reply, and refuses
// replies that are cut short or not an XRANGE answer.
func TestParseXRange(t *testing.T) {
	crlf := func(s string) []byte { return []byte(strings.ReplaceAll(s, "|", "\r\n")) }
	type entry struct{ id, e string }
	for _, tt := range []struct {
		name string
		raw  string
		want []entry
		err  bool
	}{
		{"two entries", "*2|*2|$3|1-0|*2|$1|e|$2|{}|*2|$3|2-5|*4|$1|x|$1|1|$1|e|$4|{\"\"}|", []entry{{"1-0", "{}"}, {"2-5", `{""}`}}, false},
		{"fields as a map", "*1|*2|$3|1-0|%1|$1|e|$7|{\"a\":1}|", []entry{{"1-0", `{"a":1}`}}, false},
		{"a repeated field, the last wins", "*1|*2|+1-0|*4|$1|e|$1|a|$1|e|$1|b|", []entry{{"1-0", "b"}}, false},
		{"empty", "*0|", nil, false},
		{"null", "_|", nil, false},
		{"an error", "-WRONGTYPE Operation against a key holding the wrong kind of value|", nil, true},
		{"cut short", "*1|*2|$3|1-0|*2|$1|e|$20|{}|", nil, true},
		{"not an array", ":3|", nil, true},
		{"an entry of three", "*1|*3|$3|1-0|*0|$1|x|", nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []entry
			n, last, err := parseXRange(crlf(tt.raw), func(m streamEntry) {
				e, _ := m.field("e")
				got = append(got, entry{string(m.id), string(e)})
			})
			if tt.err {
				if err == nil {
					t.Fatalf("parsed %v, want an error", got)
				}
				if tt.name != "an error" && !errors.Is(err, errReply) {
					t.Errorf("error %v, want errReply", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n != len(tt.want) || len(got) != len(tt.want) {
				t.Fatalf("got %d entries %v, want %v", n, got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("entry %d = %v, want %v", i, got[i], tt.want[i])
				}
			}
			if n > 0 && last != tt.want[n-1].id {
				t.Errorf("last = %q, want %q", last, tt.want[n-1].id)
			}
		})
	}
}
