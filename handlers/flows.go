package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sort"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog/hlog"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/store"
)

func flowName(r *http.Request) (string, error) {
	name := chi.URLParam(r, "name")
	if !event.ValidName(name) {
		return "", invalidField("name", event.NameRule)
	}
	return name, nil
}

func (a *API) listFlows(w http.ResponseWriter, r *http.Request) error {
	defs, err := a.engine.Definitions(r.Context())
	if err != nil {
		return err
	}
	sort.Slice(defs, func(i, j int) bool { return defs[i].Name < defs[j].Name })
	out := make([]flows.Listed, 0, len(defs))
	for _, d := range defs {
		out = append(out, d.Listing())
	}
	writeJSON(w, r, http.StatusOK, out)
	return nil
}

func (a *API) getFlow(w http.ResponseWriter, r *http.Request) error {
	name, err := flowName(r)
	if err != nil {
		return err
	}
	d, err := a.engine.Definition(r.Context(), name)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, d)
	return nil
}

// putFlow stores a definition sent as JSON, or as YAML when the
// Content-Type says so; 422 names every offending field.
func (a *API) putFlow(w http.ResponseWriter, r *http.Request) error {
	name, err := flowName(r)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.limits.MaxBodyBytes))
	if err != nil {
		return err
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if !isYAMLMedia(mt) {
		if err := checkJSONText(body, ""); err != nil {
			return err
		}
	}
	d, err := flows.Parse(body, isYAMLMedia(mt), name)
	var ve *flows.ValidationError
	if err != nil && !errors.As(err, &ve) {
		return badRequest("The body is not a flow definition: %v", err)
	}
	if err == nil && d.Name != name {
		err = &flows.ValidationError{Fields: map[string]string{"name": "must equal the name in the path"}}
	}
	if err == nil {
		err = a.engine.PutDefinition(r.Context(), d)
	}
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, d)
	return nil
}

func (a *API) deleteFlow(w http.ResponseWriter, r *http.Request) error {
	name, err := flowName(r)
	if err == nil {
		err = a.engine.DeleteDefinition(r.Context(), name)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) flowDiagram(w http.ResponseWriter, r *http.Request) error {
	name, err := flowName(r)
	if err != nil {
		return err
	}
	d, err := a.engine.Definition(r.Context(), name)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, d.Diagram())
	return nil
}

// startFlow starts a run with the body as input, as the v0.3 UI starts one:
// any JSON object, an empty body meaning {}.
func (a *API) startFlow(w http.ResponseWriter, r *http.Request) error {
	name, err := flowName(r)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.limits.MaxBodyBytes))
	if err != nil {
		return err
	}
	input := json.RawMessage(`{}`)
	if len(body) > 0 {
		var obj map[string]json.RawMessage
		err := decodeStrict(bytes.NewReader(body), &obj, "")
		var apiErr *nqd.Error
		if errors.As(err, &apiErr) && len(apiErr.Fields) > 0 {
			return err // a string not UTF-8, a name twice
		}
		if err != nil || obj == nil {
			return badRequest("The body must be a JSON object, the run's input.")
		}
		input = body
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > 1024 {
		return invalidField("Idempotency-Key", "at most 1024 bytes")
	}
	end, ok := a.inFlight.begin(keyOf("start", name, key))
	if !ok {
		return errKeyInFlight
	}
	defer end()
	s, err := a.engine.StartKeeping(r.Context(), name, input, key, a.offload)
	if errors.Is(err, store.ErrNotFound) {
		// The flow's name is the one thing a start looks up.
		return &nqd.Error{Code: nqd.CodeNotFound, Err: err, Message: fmt.Sprintf(
			"No flow named %q is stored: store its definition first (PUT /api/_flows/%s, or a file in NQ_FLOWS_DIR).", name, name)}
	}
	if err != nil {
		return err
	}
	if s.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, r, http.StatusOK, s)
	return nil
}

// uiCancelled is how the Nuxt Queue UIs spell a cancelled run on the runs
// page, which takes it as a status filter too.
const uiCancelled = "canceled"

// runsBody is the runs page the v0.4/v0.5 UI reads (RunPage in
// openapi.yaml); total counts the runs of the status asked for.
type runsBody struct {
	FlowName string    `json:"flowName"`
	Count    int       `json:"count"`
	Total    int64     `json:"total"`
	Offset   int       `json:"offset"`
	Limit    int       `json:"limit"`
	HasMore  bool      `json:"hasMore"`
	Items    []runItem `json:"items"`
}

type runItem struct {
	ID             string `json:"id"`
	FlowName       string `json:"flowName"`
	Status         string `json:"status"`
	CreatedAt      string `json:"createdAt"`
	StartedAt      string `json:"startedAt,omitempty"`
	CompletedAt    string `json:"completedAt,omitempty"`
	StepCount      int    `json:"stepCount"`
	CompletedSteps int    `json:"completedSteps"`
}

func isoMS(ms int64) string { return time.UnixMilli(ms).UTC().Format(event.TimeFormat) }

func (a *API) listRuns(w http.ResponseWriter, r *http.Request) error {
	name, err := flowName(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit, err := intParam(q, "limit", defaultListLimit, 1, maxListLimit)
	if err != nil {
		return err
	}
	offset, err := intParam(q, "offset", 0, 0, noUpperBound)
	if err != nil {
		return err
	}
	if q.Get("status") == uiCancelled {
		q.Set("status", store.RunCancelled)
	}
	status, err := enumParam(q, "status", store.RunStatuses)
	if err != nil {
		return err
	}
	page, err := a.engine.Runs(r.Context(), name, status, offset, limit)
	if err != nil {
		return err
	}
	body := runsBody{FlowName: name, Count: len(page.Runs), Total: page.Total, Offset: offset, Limit: limit, Items: []runItem{}}
	for _, m := range page.Runs {
		it := runItem{
			ID: m.RunID, FlowName: name, Status: m.Status, CreatedAt: isoMS(m.StartedAt), StartedAt: isoMS(m.StartedAt),
			StepCount: m.StepCount, CompletedSteps: m.CompletedSteps,
		}
		switch it.Status {
		case "":
			it.Status = "unknown"
		case store.RunCancelled:
			it.Status = uiCancelled
		}
		if m.CompletedAt > 0 {
			it.CompletedAt = isoMS(m.CompletedAt)
		}
		body.Items = append(body.Items, it)
	}
	body.HasMore = int64(offset+len(body.Items)) < body.Total
	w.Header().Set("Cache-Control", "no-store, no-cache, must-revalidate")
	writeJSON(w, r, http.StatusOK, body)
	return nil
}

func runParams(r *http.Request) (flow, run string, err error) {
	if flow, err = flowName(r); err != nil {
		return "", "", err
	}
	run = chi.URLParam(r, "runId")
	if !event.ValidContextID(run) {
		return "", "", invalidField("runId", "must be a context id")
	}
	return flow, run, nil
}

type cancelBody struct {
	Success        bool   `json:"success"`
	RunID          string `json:"runId"`
	FlowName       string `json:"flowName"`
	PreviousStatus string `json:"previousStatus"`
}

func (a *API) cancelRun(w http.ResponseWriter, r *http.Request) error {
	flow, run, err := runParams(r)
	if err != nil {
		return err
	}
	prev, err := a.engine.Cancel(r.Context(), flow, run, "")
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, cancelBody{Success: true, RunID: run, FlowName: flow, PreviousStatus: prev})
	return nil
}

func (a *API) restartRun(w http.ResponseWriter, r *http.Request) error {
	flow, run, err := runParams(r)
	if err != nil {
		return err
	}
	res, err := a.engine.Restart(r.Context(), flow, run)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, res)
	return nil
}

type clearBody struct {
	Success        bool   `json:"success"`
	FlowName       string `json:"flowName"`
	DeletedStreams int    `json:"deletedStreams"`
	DeletedIndex   int    `json:"deletedIndex"`
}

func (a *API) clearHistory(w http.ResponseWriter, r *http.Request) error {
	flow, err := flowName(r)
	if err != nil {
		return err
	}
	runs, err := a.runsWithData(r.Context(), flow)
	if err != nil {
		return err
	}
	n, err := a.engine.ClearHistory(r.Context(), flow)
	if err != nil {
		return err
	}
	a.dropData(r.Context(), hlog.FromRequest(r), runs)
	writeJSON(w, r, http.StatusOK, clearBody{Success: true, FlowName: flow, DeletedStreams: n, DeletedIndex: n})
	return nil
}

// runListItem is a list route item with the run index's metadata.
type runListItem struct {
	listItem
	Status      string `json:"status"`
	StartedAt   string `json:"startedAt,omitempty"`
	CompletedAt string `json:"completedAt,omitempty"`
}

type runListBody struct {
	Type  string        `json:"type"`
	Name  string        `json:"name"`
	Count int           `json:"count"`
	Total int64         `json:"total"`
	Items []runListItem `json:"items"`
}

// listRunsByStatus answers the list route with status: it pages over the
// runs of that status, not over one page filtered.
func (a *API) listRunsByStatus(w http.ResponseWriter, r *http.Request, flow, status string, offset, limit int) error {
	page, err := a.engine.Runs(r.Context(), flow, status, offset, limit)
	if err != nil {
		return err
	}
	body := runListBody{Type: "flow", Name: flow, Count: len(page.Runs), Total: page.Total, Items: []runListItem{}}
	for _, m := range page.Runs {
		it := runListItem{
			listItem: listItem{ID: m.RunID, Timestamp: m.StartedAt, CreatedAt: isoMS(m.StartedAt)},
			Status:   m.Status, StartedAt: isoMS(m.StartedAt),
		}
		if m.CompletedAt > 0 {
			it.CompletedAt = isoMS(m.CompletedAt)
		}
		body.Items = append(body.Items, it)
	}
	writeJSON(w, r, http.StatusOK, body)
	return nil
}
