package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Restorer brings an archived context back into the store with its ids; see
// store.Restorer.
type Restorer interface {
	Restore(ctx context.Context, c store.Context, evs []event.Event, record *store.RunMeta) error
}

// errRestoreOver answers a restore of a context the store still holds: a
// restore brings back what is gone and never merges into what is there.
var errRestoreOver = &nqd.Error{
	Code:    nqd.CodeConflict,
	Message: "The context has events or a run record in the store; only a context that is gone can be restored.",
}

// restoreBody answers a restore: what the store now holds of the context.
type restoreBody struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	EventCount  int    `json:"eventCount"`
	LastEventID string `json:"lastEventId"`
}

// restoreContext writes an archived context back into the store, its events
// with their original ids so that links to them (lastEventId, time travel
// points) stay valid, and a run's record so it is listed again.
func (a *API) restoreContext(w http.ResponseWriter, r *http.Request) error {
	c, err := a.contextParam(r)
	if err != nil {
		return err
	}
	if a.archive == nil {
		return errNoArchive
	}
	m, evs, err := a.archive.Get(r.Context(), c)
	if err != nil {
		return err
	}
	if len(evs) == 0 {
		// Archives are of finished contexts, which have events; an empty
		// one has lost them.
		return fmt.Errorf("%w: archive of %s holds no events", archive.ErrCorrupt, c)
	}
	var record *store.RunMeta
	if len(m.Record) > 0 {
		record = new(store.RunMeta)
		if err := json.Unmarshal(m.Record, record); err != nil {
			return fmt.Errorf("%w: record of %s: %v", archive.ErrCorrupt, c, err)
		}
	}
	if err := a.restorer.Restore(r.Context(), c, evs, record); err != nil {
		if errors.Is(err, store.ErrConflict) {
			err = errRestoreOver
		}
		return err
	}
	writeJSON(w, r, http.StatusCreated, restoreBody{Type: c.Type, ID: c.ID, EventCount: len(evs), LastEventID: evs[len(evs)-1].ID.String()})
	return nil
}
