package handlers

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/reducers"
	"github.com/nqd-dev/nqd/store"
)

// pointRule is the 400 message for a bad at, from or to.
const pointRule = "must be an entry id such as 1732000000000-0, an RFC 3339 time or epoch milliseconds"

// parsePoint reads a position in a stream: an entry id is itself; a time (RFC
// 3339 or epoch milliseconds) is the last id it can carry, so every event
// written at or before it counts. A time before 1970 is before every event.
func parsePoint(s string) (event.ID, bool) {
	ms, seq, hasSeq := strings.Cut(s, "-")
	if allDigits(ms) && (!hasSeq || allDigits(seq)) {
		if hasSeq {
			id, err := event.ParseID(s)
			return id, err == nil
		}
		n, err := strconv.ParseUint(ms, 10, 64)
		return event.ID{MS: n, Seq: ^uint64(0)}, err == nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return event.ID{}, false
	}
	if t.Before(time.UnixMilli(0)) {
		return event.ID{}, true
	}
	return event.IDAt(t), true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// pointParam reads an optional position parameter; def when absent.
func pointParam(q url.Values, name string, def event.ID) (event.ID, error) {
	if !q.Has(name) {
		return def, nil
	}
	id, ok := parsePoint(q.Get(name))
	if !ok {
		return event.ID{}, invalidField(name, pointRule)
	}
	return id, nil
}

// positionOf is a state's last event id, or nil before any event.
func positionOf(s reducers.State) *string {
	if s.Count() == 0 {
		return nil
	}
	p := s.Position().String()
	return &p
}

// getContextAt answers the context route as of `at` (time travel): the state,
// eventCount and lastEventId are those of the events up to at, and events
// stop there too.
func (a *API) getContextAt(w http.ResponseWriter, r *http.Request, c store.Context, src contextSource, at, after event.ID, limit int) error {
	st, err := src.StateAt(r.Context(), at)
	if err != nil {
		return err
	}
	body := contextBody{
		Type: c.Type, ID: c.ID, EventCount: int64(st.Count()), LastEventID: positionOf(st),
		State: st, Events: []event.Event{},
	}
	if st.Count() > 0 {
		// Through the state's position rather than at, so the events agree
		// with the state even if events up to at are still being appended.
		evs, err := src.Range(r.Context(), store.RangeQuery{After: after, Through: st.Position(), Limit: limit})
		if err != nil {
			return err
		}
		body.Events = evs
	}
	writeJSON(w, r, http.StatusOK, body)
	return nil
}

// requireEvents refuses a context that has no events at all: its reducer's
// initial state would pass for a real one (a flow's reads as running). st is
// the state at point; when it holds no event, the newest state tells a point
// before the first event of a context that has some from a context that has
// none. The context route keeps answering such a context with eventCount 0,
// as the v0.3 UI expects.
func requireEvents(ctx context.Context, c store.Context, src contextSource, st reducers.State, point event.ID) error {
	if st.Count() > 0 {
		return nil
	}
	if point != event.MaxID {
		newest, err := src.StateAt(ctx, event.MaxID)
		if err != nil || newest.Count() > 0 {
			return err
		}
	}
	return &nqd.Error{Code: nqd.CodeNotFound, Message: fmt.Sprintf(
		"The %s %q has no events: nothing started it, or nothing it wrote is stored yet.", c.Type, c.ID)}
}

// stateBody answers the state route.
type stateBody struct {
	Type        string         `json:"type"`
	ID          string         `json:"id"`
	At          *string        `json:"at"`          // the position asked for, null for the newest
	LastEventID *string        `json:"lastEventId"` // the state's position, null before any event
	State       reducers.State `json:"state"`
}

// getState answers a context's state alone, the newest or as of `at`.
func (a *API) getState(w http.ResponseWriter, r *http.Request) error {
	c, err := a.contextParam(r)
	if err != nil {
		return err
	}
	at, err := pointParam(r.URL.Query(), "at", event.MaxID)
	if err != nil {
		return err
	}
	src, err := a.sourceOf(r, c)
	if err != nil {
		return err
	}
	st, err := src.StateAt(r.Context(), at)
	if err != nil {
		return err
	}
	if err := requireEvents(r.Context(), c, src, st, at); err != nil {
		return err
	}
	body := stateBody{Type: c.Type, ID: c.ID, LastEventID: positionOf(st), State: st}
	if at != event.MaxID {
		s := at.String()
		body.At = &s
	}
	writeJSON(w, r, http.StatusOK, body)
	return nil
}

// diffBody answers the diff route: the positions of the two states compared
// and what changed between them.
type diffBody struct {
	From *string        `json:"from"`
	To   *string        `json:"to"`
	Diff reducers.Delta `json:"diff"`
}

// getStateDiff answers what changed in a context between `from` (default:
// before its first event) and `to` (default: its newest event).
func (a *API) getStateDiff(w http.ResponseWriter, r *http.Request) error {
	c, err := a.contextParam(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	from, err := pointParam(q, "from", event.ID{})
	if err != nil {
		return err
	}
	to, err := pointParam(q, "to", event.MaxID)
	if err != nil {
		return err
	}
	src, err := a.sourceOf(r, c)
	if err != nil {
		return err
	}
	x, err := src.StateAt(r.Context(), from)
	if err != nil {
		return err
	}
	y, err := src.StateAt(r.Context(), to)
	if err != nil {
		return err
	}
	if err := requireEvents(r.Context(), c, src, y, to); err != nil {
		return err
	}
	d, err := reducers.Diff(x, y)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, diffBody{From: positionOf(x), To: positionOf(y), Diff: d})
	return nil
}
