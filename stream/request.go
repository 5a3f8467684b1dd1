package stream

import (
	"net/http"
	"strings"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// ResumePosition reads the client's last event: the Last-Event-ID header,
// which a browser sends on its own reconnects and so is the freshest, then
// the lastEventId and fromId query parameters of a first connect. A position
// that is not an id resumes from nowhere (the zero ID): the stream can only
// reset it. "0" is the beginning, as in Redis: no position at all.
func ResumePosition(r *http.Request) (resume bool, from event.ID) {
	s := r.Header.Get("Last-Event-ID")
	for _, name := range []string{"lastEventId", "fromId"} {
		if s == "" {
			s = r.URL.Query().Get(name)
		}
	}
	if s == "" {
		return false, event.ID{}
	}
	id, err := event.ParseID(s)
	if err != nil {
		return true, event.ID{}
	}
	return !id.IsZero(), id
}

// TailStream reads the stream a raw tail names, `<prefix>:<type>:<id>`, on a
// store whose keys start with prefix. c is the context key names, for the
// caller's access check even when it is not valid (zero when key names
// none). quiet is a tail of no context: no stream at all, or the
// `<prefix>:events` that the v0.3 UI's dashboard tails by default, which
// nothing writes. ok is false when key is not quiet and names another prefix
// or no valid context.
func TailStream(key, prefix string) (c store.Context, quiet, ok bool) {
	keyPrefix, rest, _ := strings.Cut(key, ":")
	if typ, id, _ := strings.Cut(rest, ":"); id != "" {
		c = store.Context{Type: typ, ID: id}
	}
	if key == "" || key == prefix+":events" {
		return c, true, true
	}
	return c, false, keyPrefix == prefix && c.Valid()
}
