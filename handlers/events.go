package handlers

import (
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Paging of the context route: the v0.3 UI read up to 1000 events.
const (
	defaultEventLimit = 1000
	maxEventLimit     = 10000
)

// Paging of the list route, as the v0.3 UI pages runs.
const (
	defaultListLimit = 50
	maxListLimit     = 100
)

// eventsBody answers a batch append.
type eventsBody struct {
	Events []event.Event `json:"events"`
}

// appendEvents stores one record or a batch, all or nothing. A replay of an
// Idempotency-Key answers the first append's body and status again, marked by
// the Idempotent-Replayed header, so a retrying client cannot tell a lost
// answer from a repeated one.
func (a *API) appendEvents(w http.ResponseWriter, r *http.Request) error {
	c, err := a.contextParam(r)
	if err != nil {
		return err
	}
	opts, err := idempotencyOptions(r)
	if err != nil {
		return err
	}
	end, ok := a.inFlight.begin(keyOf("append", c.String(), opts.IdempotencyKey))
	if !ok {
		return errKeyInFlight
	}
	defer end()
	r.Body = http.MaxBytesReader(w, r.Body, a.limits.MaxBodyBytes)
	evs, batch, err := a.decodeAppend(r, c)
	if err != nil {
		return err
	}
	res, err := a.store.Append(r.Context(), c, evs, opts)
	if err != nil {
		return err
	}
	if !batch && len(res.Events) != 1 {
		return fmt.Errorf("%w: idempotency key first used for %d events", store.ErrConflict, len(res.Events))
	}
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if batch {
		writeJSON(w, r, http.StatusCreated, eventsBody{Events: res.Events})
		return nil
	}
	writeJSON(w, r, http.StatusCreated, res.Events[0])
	return nil
}

// contextBody answers the context route.
type contextBody struct {
	Type        string        `json:"type"`
	ID          string        `json:"id"`
	EventCount  int64         `json:"eventCount"`
	LastEventID *string       `json:"lastEventId"` // null for an empty context
	State       any           `json:"state,omitempty"`
	Events      []event.Event `json:"events"`
}

// getContext answers a context's events oldest first, after fromId, with the
// stream's length and last id. The length and last id are read first and the
// events only up to that id, so the three agree even while others append.
// `source=archive` answers the same from the context's archive.
func (a *API) getContext(w http.ResponseWriter, r *http.Request) error {
	c, err := a.contextParam(r)
	if err != nil {
		return err
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
	at, err := pointParam(q, "at", event.MaxID)
	if err != nil {
		return err
	}
	src, err := a.sourceOf(r, c)
	if err != nil {
		return err
	}
	if q.Has("at") {
		return a.getContextAt(w, r, c, src, at, after, limit)
	}

	info, err := src.Info(r.Context())
	if err != nil {
		return err
	}
	body := contextBody{Type: c.Type, ID: c.ID, EventCount: info.Length, Events: []event.Event{}}
	if info.Length == 0 {
		writeJSON(w, r, http.StatusOK, body)
		return nil
	}
	last := info.LastID.String()
	body.LastEventID = &last
	evs, err := src.Range(r.Context(), store.RangeQuery{After: after, Through: info.LastID, Limit: limit})
	if err != nil {
		return err
	}
	if evs != nil {
		body.Events = evs
	}
	if body.State, err = src.StateAt(r.Context(), info.LastID); err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, body)
	return nil
}

// listBody answers the list route (ContextList in openapi.yaml), in the shape
// the v0.3 UI reads.
type listBody struct {
	Type  string     `json:"type"`
	Name  string     `json:"name,omitempty"`
	Count int        `json:"count"`
	Total int64      `json:"total"`
	Items []listItem `json:"items"`
}

type listItem struct {
	ID        string `json:"id"`
	Timestamp int64  `json:"timestamp"` // epoch ms
	CreatedAt string `json:"createdAt"` // the same instant, ISO 8601
}

// listIndex is the index the list route names.
type listIndex struct {
	Type string `json:"type" validate:"context_type"`
	Name string `json:"name" validate:"omitempty,key_name"`
}

// listContexts pages an index newest first: the runs of one flow with
// `name`, every context of the type without.
func (a *API) listContexts(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p := listIndex{Type: chi.URLParam(r, "type"), Name: q.Get("name")}
	if err := a.validateStruct(p, ""); err != nil {
		return err
	}
	ix := store.Index{Type: p.Type, Name: p.Name}
	status, err := enumParam(q, "status", store.RunStatuses)
	if err != nil {
		return err
	}
	if q.Has("status") && (p.Type != "flow" || p.Name == "") {
		// Paging by status needs the engine's run index of one flow; a
		// filter silently ignored would answer the wrong runs.
		return invalidField("status", "needs type flow, a name and the flow engine")
	}
	limit, err := intParam(q, "limit", defaultListLimit, 1, maxListLimit)
	if err != nil {
		return err
	}
	offset, err := intParam(q, "offset", 0, 0, noUpperBound)
	if err != nil {
		return err
	}

	if status != "" {
		return a.listRunsByStatus(w, r, p.Name, status, offset, limit)
	}
	page, err := a.store.IndexList(r.Context(), ix, offset, limit)
	if err != nil {
		return err
	}
	body := listBody{Type: ix.Type, Name: ix.Name, Count: len(page.Entries), Total: page.Total, Items: make([]listItem, 0, len(page.Entries))}
	for _, e := range page.Entries {
		body.Items = append(body.Items, listItem{
			ID:        e.ID,
			Timestamp: e.Score,
			CreatedAt: time.UnixMilli(e.Score).UTC().Format(event.TimeFormat),
		})
	}
	writeJSON(w, r, http.StatusOK, body)
	return nil
}

type statusBody struct {
	Status string `json:"status"`
}

// healthz says the process serves requests; it does not touch the store, so
// a store outage does not get the process restarted.
func (a *API) healthz(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, r, http.StatusOK, statusBody{Status: "ok"})
	return nil
}

// readyz says whether the store answers, so that a load balancer sends no
// traffic to an instance that would fail it.
func (a *API) readyz(w http.ResponseWriter, r *http.Request) error {
	if err := a.store.Ping(r.Context()); err != nil {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	for _, check := range a.ready {
		if err := check(r.Context()); err != nil {
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
	}
	writeJSON(w, r, http.StatusOK, statusBody{Status: "ok"})
	return nil
}
