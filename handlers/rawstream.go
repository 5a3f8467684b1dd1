package handlers

import (
	"cmp"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// feedContexts is how many of the newest flow runs the `<prefix>:events`
// feed reads: nqd keeps no stream across contexts, so the feed is the newest
// events of the runs started last.
const feedContexts = 20

// readRawStream serves GET /api/_events/<key>?limit=&fromId=, the v0.3 UI's read
// of a stream by its storage key (`nq:<type>:<id>`, colons URL-encoded or
// not): a JSON array of records, oldest first, after fromId. The key is
// checked part by part before anything reaches the store.
func (a *API) readRawStream(w http.ResponseWriter, r *http.Request) error {
	key, err := url.PathUnescape(chi.URLParam(r, "key"))
	if err != nil {
		return invalidField("key", "must be URL-encoded")
	}
	q := r.URL.Query()
	limit, err := intParam(q, "limit", defaultEventLimit, 1, maxEventLimit)
	if err != nil {
		return err
	}
	after, err := idParam(q, "fromId")
	if err != nil {
		return err
	}
	if key == a.keyPrefix+":events" {
		return a.recentEvents(w, r, after, limit)
	}
	prefix, rest, _ := strings.Cut(key, ":")
	typ, id, _ := strings.Cut(rest, ":")
	c := store.Context{Type: typ, ID: id}
	if prefix != a.keyPrefix || !c.Valid() {
		return invalidField("key", "must be "+a.keyPrefix+":<type>:<id> with a valid type and id, or "+a.keyPrefix+":events")
	}
	src, err := a.sourceOf(r, c)
	if err != nil {
		return err
	}
	evs, err := src.Range(r.Context(), store.RangeQuery{After: after, Limit: limit})
	if err != nil {
		return err
	}
	if evs == nil {
		evs = []event.Event{}
	}
	writeJSON(w, r, http.StatusOK, evs)
	return nil
}

// recentEvents answers the `<prefix>:events` feed: the newest limit events
// of the feedContexts most recently started flow runs, oldest first; after
// fromId, the oldest limit events past it, so a client pages forward.
func (a *API) recentEvents(w http.ResponseWriter, r *http.Request, after event.ID, limit int) error {
	page, err := a.store.IndexList(r.Context(), store.Index{Type: "flow"}, 0, feedContexts)
	if err != nil {
		return err
	}
	var all []event.Event
	for _, e := range page.Entries {
		evs, err := a.store.Range(r.Context(), store.Context{Type: "flow", ID: e.ID},
			store.RangeQuery{After: after, Limit: limit, Reverse: after.IsZero()})
		if err != nil {
			return err
		}
		all = append(all, evs...)
	}
	slices.SortStableFunc(all, func(x, y event.Event) int {
		return cmp.Or(x.ID.Compare(y.ID), cmp.Compare(x.Subject, y.Subject))
	})
	if after.IsZero() {
		all = all[max(0, len(all)-limit):]
	} else {
		all = all[:min(limit, len(all))]
	}
	if all == nil {
		all = []event.Event{}
	}
	writeJSON(w, r, http.StatusOK, all)
	return nil
}
