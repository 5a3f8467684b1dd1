package handlers

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/compact"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Compactor moves a context's early events into the archive, leaving a
// checkpoint behind; see compact.Compactor.
type Compactor interface {
	Compact(ctx context.Context, c store.Context, keepAfter event.ID) (compact.Result, error)
}

// History reads a context's whole stream, the events compaction trimmed
// included; see compact.NewReader.
type History interface {
	Range(ctx context.Context, c store.Context, q store.RangeQuery) ([]event.Event, error)
}

// errNoCompact answers a compaction on a server with nowhere to put the
// events: trimming without an archive would lose them.
var errNoCompact = &nqd.Error{
	Code:    nqd.CodeNotFound,
	Message: "This server cannot compact: set NQ_ARCHIVE_URL (or NQ_ARCHIVE_DIR), on a store that can trim its streams.",
}

// beforeRule is the 400 message for a bad `before`.
const beforeRule = "must be an entry id such as 1732000000000-0, an RFC 3339 time or epoch milliseconds"

// compactBody answers a compaction.
type compactBody struct {
	Type       string `json:"type"`
	ID         string `json:"id"`
	Checkpoint string `json:"checkpoint"`
	Archived   int64  `json:"archived"`
	Trimmed    int64  `json:"trimmed"`
	Segments   int    `json:"segments"`
}

// compactContext archives and trims the events of a context before
// `before`. Reads keep answering for them through the archive, so this
// bounds the live stream without changing any answer.
func (a *API) compactContext(w http.ResponseWriter, r *http.Request) error {
	c, err := a.contextParam(r)
	if err != nil {
		return err
	}
	if a.compact == nil {
		return errNoCompact
	}
	keepAfter, ok := parseBefore(r.URL.Query().Get("before"))
	if !ok {
		return invalidField("before", beforeRule)
	}
	res, err := a.compact.Compact(r.Context(), c, keepAfter)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, compactBody{
		Type: c.Type, ID: c.ID, Checkpoint: res.Checkpoint.String(),
		Archived: res.Archived, Trimmed: res.Trimmed, Segments: res.Segments,
	})
	return nil
}

// parseBefore reads `before`, an exclusive bound, as the last id it lets
// through: an entry id keeps itself and everything after it live; a time
// (RFC 3339 or epoch milliseconds) keeps the events written at or after it.
// A bound at or before the first possible id compacts nothing and is refused.
func parseBefore(s string) (event.ID, bool) {
	var bound event.ID
	ms, seq, hasSeq := strings.Cut(s, "-")
	switch {
	case allDigits(ms) && hasSeq && allDigits(seq):
		id, err := event.ParseID(s)
		if err != nil {
			return event.ID{}, false
		}
		bound = id
	case allDigits(ms) && !hasSeq:
		n, err := strconv.ParseUint(ms, 10, 64)
		if err != nil {
			return event.ID{}, false
		}
		bound = event.ID{MS: n}
	default:
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || t.Before(time.UnixMilli(1)) {
			return event.ID{}, false
		}
		// Rounded up: an event within the bound's millisecond but before
		// it is before it.
		n := t.Truncate(time.Millisecond)
		if n.Before(t) {
			n = n.Add(time.Millisecond)
		}
		bound = event.ID{MS: uint64(n.UnixMilli())}
	}
	return prev(bound)
}

// prev is the id just before id, false for the zero id.
func prev(id event.ID) (event.ID, bool) {
	switch {
	case id.Seq > 0:
		return event.ID{MS: id.MS, Seq: id.Seq - 1}, true
	case id.MS > 0:
		p := event.ID{MS: id.MS - 1, Seq: ^uint64(0)}
		return p, !p.IsZero()
	}
	return event.ID{}, false
}
