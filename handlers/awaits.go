package handlers

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
)

// sourceHeaders are not recorded in trigger.fired: they may carry
// credentials.
var sourceHeaders = map[string]bool{"Authorization": true, "Cookie": true, "Proxy-Authorization": true}

func triggerSource(r *http.Request) engine.TriggerSource {
	src := engine.TriggerSource{Addr: clientIPOf(r), Headers: map[string]string{}}
	for name, vals := range r.Header {
		if sourceHeaders[name] || len(vals) == 0 || len(src.Headers) >= 32 {
			continue
		}
		v := vals[0]
		if len(v) > 256 {
			v = v[:256]
		}
		src.Headers[name] = v
	}
	return src
}

func (a *API) fireTrigger(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "id")
	if !event.ValidContextID(id) {
		return &nqd.Error{Code: nqd.CodeNotFound, Message: "No such trigger."}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.limits.MaxEventBytes))
	if err != nil {
		return err
	}
	payload := json.RawMessage(`null`)
	if len(bytes.TrimSpace(body)) > 0 {
		if err := checkJSONText(body, "payload"); err != nil {
			return err
		}
		if !json.Valid(body) {
			return badRequest("The body must be JSON, the trigger's payload.")
		}
		payload = body
	}
	out, err := a.engine.FireTrigger(r.Context(), id, payload, triggerSource(r))
	if err != nil {
		return err
	}
	if out.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, r, http.StatusOK, out)
	return nil
}

// waitsBody is the answer of GET /api/_flows/waits.
type waitsBody struct {
	Count int           `json:"count"`
	Items []engine.Wait `json:"items"`
}

func (a *API) listWaits(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	wq := engine.WaitQuery{Kind: q.Get("kind"), FlowName: q.Get("flowName"), EventKind: q.Get("event")}
	switch wq.Kind {
	case "", "time", "event", "trigger":
	default:
		return invalidField("kind", "must be time, event or trigger")
	}
	if wq.FlowName != "" && !event.ValidName(wq.FlowName) {
		return invalidField("flowName", event.NameRule)
	}
	if v := q.Get("before"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t, terr := time.Parse(time.RFC3339Nano, v)
			if terr != nil {
				return invalidField("before", "epoch milliseconds or an RFC 3339 time")
			}
			ms = t.UnixMilli()
		}
		wq.Before = ms
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return invalidField("limit", "1 to 1000")
		}
		wq.Limit = n
	}
	items, err := a.engine.Waits(r.Context(), wq)
	if err != nil {
		return err
	}
	if items == nil {
		items = []engine.Wait{}
	}
	writeJSON(w, r, http.StatusOK, waitsBody{Count: len(items), Items: items})
	return nil
}
