package stream

import (
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/nqd-dev/nqd/event"
)

// FuzzResumePlan feeds the client's position, as the Last-Event-ID header
// and the lastEventId query parameter, which any client may set: reading it
// never panics, and a position it keeps is one the client sent.
func FuzzResumePlan(f *testing.F) {
	f.Add("1719667800000-3", "")
	f.Add("", "0")
	f.Add("yesterday", "1-0")
	f.Add("18446744073709551615-18446744073709551615", "-1")
	f.Fuzz(func(t *testing.T, header, query string) {
		r := httptest.NewRequest("GET", "/api/_events/flow/r/stream?lastEventId="+url.QueryEscape(query), nil)
		if header != "" {
			r.Header.Set("Last-Event-ID", header)
		}
		p := resumePlan(r)
		sent := r.Header.Get("Last-Event-ID")
		if sent == "" {
			sent = query
		}
		if !p.resume {
			if sent != "" {
				if id, err := event.ParseID(sent); err != nil || !id.IsZero() {
					t.Fatalf("position %q ignored", sent)
				}
			}
			return
		}
		if p.from.IsZero() {
			if _, err := event.ParseID(sent); err == nil {
				t.Fatalf("the id %q was taken for an unknown position", sent)
			}
			return
		}
		if id, err := event.ParseID(sent); err != nil || id != p.from {
			t.Fatalf("resumes from %v, the client sent %q", p.from, sent)
		}
	})
}
