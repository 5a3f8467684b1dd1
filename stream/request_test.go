package stream

import (
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

func TestResumePosition(t *testing.T) {
	for _, tc := range []struct {
		name, header, query string
		resume              bool
		from                string
	}{
		{"none", "", "", false, ""},
		{"Last-Event-ID", "5-1", "", true, "5-1"},
		{"lastEventId", "", "lastEventId=5-1", true, "5-1"},
		{"fromId", "", "fromId=5-1", true, "5-1"},
		{"lastEventId over fromId", "", "fromId=3-0&lastEventId=5-1", true, "5-1"},
		// A browser's own reconnect sends the header; the URL keeps the
		// first fromId (the v0.3 UI puts it there), which must not win.
		{"header over query", "5-1", "fromId=3-0", true, "5-1"},
		{"not an id", "yesterday", "", true, "0-0"},
		{"zero is the beginning", "0", "", false, "0-0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/api/_events/flow/r/stream?"+tc.query, nil)
			if tc.header != "" {
				r.Header.Set("Last-Event-ID", tc.header)
			}
			resume, from := ResumePosition(r)
			want := event.ID{}
			if tc.from != "" {
				var err error
				if want, err = event.ParseID(tc.from); err != nil {
					t.Fatal(err)
				}
			}
			if resume != tc.resume || from != want {
				t.Errorf("got %v %v, want %v %v", resume, from, tc.resume, want)
			}
		})
	}
}

// FuzzResumePosition feeds the client's position, as the Last-Event-ID
// header and the lastEventId query parameter, which any client may set:
// reading it never panics, and a position it keeps is one the client sent.
func FuzzResumePosition(f *testing.F) {
	f.Add("1719667800000-3", "")
	f.Add("", "0")
	f.Add("yesterday", "1-0")
	f.Add("18446744073709551615-18446744073709551615", "-1")
	f.Fuzz(func(t *testing.T, header, query string) {
		r := httptest.NewRequest("GET", "/api/_events/flow/r/stream?lastEventId="+url.QueryEscape(query), nil)
		if header != "" {
			r.Header.Set("Last-Event-ID", header)
		}
		resume, from := ResumePosition(r)
		sent := r.Header.Get("Last-Event-ID")
		if sent == "" {
			sent = query
		}
		if !resume {
			if sent != "" {
				if id, err := event.ParseID(sent); err != nil || !id.IsZero() {
					t.Fatalf("position %q ignored", sent)
				}
			}
			return
		}
		if from.IsZero() {
			if _, err := event.ParseID(sent); err == nil {
				t.Fatalf("the id %q was taken for an unknown position", sent)
			}
			return
		}
		if id, err := event.ParseID(sent); err != nil || id != from {
			t.Fatalf("resumes from %v, the client sent %q", from, sent)
		}
	})
}

func TestTailStream(t *testing.T) {
	for _, tc := range []struct {
		key       string
		c         store.Context
		quiet, ok bool
	}{
		{"", store.Context{}, true, true},
		{"nq:events", store.Context{}, true, true},
		{"nq:flow:run-1", store.Context{Type: "flow", ID: "run-1"}, false, true},
		// Another prefix's stream is refused, but names its context for
		// the access check.
		{"other:flow:run-1", store.Context{Type: "flow", ID: "run-1"}, false, false},
		{"other:events", store.Context{}, false, false},
		{"nq:flow", store.Context{}, false, false},
		{"nq:flow:bad id", store.Context{Type: "flow", ID: "bad id"}, false, false},
	} {
		c, quiet, ok := TailStream(tc.key, "nq")
		if c != tc.c || quiet != tc.quiet || ok != tc.ok {
			t.Errorf("TailStream(%q) = %+v, %v, %v; want %+v, %v, %v", tc.key, c, quiet, ok, tc.c, tc.quiet, tc.ok)
		}
	}
}
