package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Large step data travels by reference. A step's result or an emit's
// payload over Limits.LargeDataBytes is kept in a DataStore (the archive's
// bucket) under its run and its SHA-256, and its event carries, where the
// value would be,
//
//	{"$nqdRef": {"run": "<runId>", "sha256": "<hex>", "bytes": <n>,
//	             "url": "/api/_events/flow/<runId>/data/<sha256>"}}
//
// The rule for reads: a worker's claimed input holds the values themselves
// (references resolved), so a step sees its data as before; every other read
// of the events (pages, SSE, state) carries the reference, and the value is
// one GET of its url away, with the read scope. Request bodies stay bounded
// by NQ_MAX_BODY_BYTES either way.

// DataStore keeps step data too large to travel in its event;
// *archive.Bucket is one.
type DataStore interface {
	// PutData keeps value for run. Errors: store.ErrInvalid, IO errors.
	PutData(ctx context.Context, run string, value []byte) (archive.Ref, error)
	// GetData reads what ref names, checked against its hash. Errors:
	// store.ErrNotFound, archive.ErrCorrupt, store.ErrInvalid, IO errors.
	GetData(ctx context.Context, ref archive.Ref) ([]byte, error)
	// ListData lists every value kept. Errors: IO errors.
	ListData(ctx context.Context) ([]archive.Ref, error)
	// DeleteData deletes run's values unless an archive of the run refers
	// to them, and says how many it deleted. Errors: store.ErrInvalid, IO
	// errors.
	DeleteData(ctx context.Context, run string) (int, error)
}

// refKey is the one member of a reference object.
const refKey = "$nqdRef"

type refValue struct {
	Ref refBody `json:"$nqdRef"`
}

type refBody struct {
	archive.Ref
	URL string `json:"url"`
}

// offload replaces value, step data of run, by a reference when it is over
// the threshold and a DataStore is set; otherwise it hands value back.
func (a *API) offload(ctx context.Context, run string, value json.RawMessage) (json.RawMessage, error) {
	if a.data == nil || int64(len(value)) <= a.limits.LargeDataBytes {
		return value, nil
	}
	ref, err := a.data.PutData(ctx, run, value)
	if err != nil {
		return nil, err
	}
	return json.Marshal(refValue{Ref: refBody{Ref: ref, URL: "/api/_events/flow/" + url.PathEscape(run) + "/data/" + ref.SHA256}})
}

// offloadEmit puts a large emit's payload by reference; the event keeps
// its name in the {event, payload} shape the engine and reducers read.
func (a *API) offloadEmit(ctx context.Context, run string, ev event.Event) (event.Event, error) {
	if ev.Kind != "emit" || a.data == nil || int64(len(ev.Data)) <= a.limits.LargeDataBytes {
		return ev, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(ev.Data, &fields); err != nil {
		return ev, nil // not an object: the engine refuses it as it would inline
	}
	var name string
	var payload json.RawMessage
	if raw, ok := fields["event"]; ok {
		_ = json.Unmarshal(raw, &name)
		payload = fields["payload"]
	} else if raw, ok := fields["name"]; ok {
		_ = json.Unmarshal(raw, &name)
		delete(fields, "name")
		var err error
		if payload, err = json.Marshal(fields); err != nil {
			return ev, err
		}
	}
	if name == "" || len(payload) == 0 {
		return ev, nil
	}
	ref, err := a.offload(ctx, run, payload)
	if err != nil {
		return ev, err
	}
	data, err := json.Marshal(struct {
		Event   string          `json:"event"`
		Payload json.RawMessage `json:"payload"`
	}{name, ref})
	if err != nil {
		return ev, err
	}
	ev.Data = data
	return ev, nil
}

// parseRef reads a reference object; ok is false for any other value.
func parseRef(raw json.RawMessage) (archive.Ref, bool) {
	trimmed := bytes.TrimSpace(raw)
	if !bytes.HasPrefix(trimmed, []byte("{")) || !bytes.Contains(trimmed, []byte(`"`+refKey+`"`)) {
		return archive.Ref{}, false
	}
	var v map[string]json.RawMessage
	if json.Unmarshal(trimmed, &v) != nil || len(v) != 1 || v[refKey] == nil {
		return archive.Ref{}, false
	}
	var body refBody
	if json.Unmarshal(v[refKey], &body) != nil || body.SHA256 == "" {
		return archive.Ref{}, false
	}
	return body.Ref, true
}

// resolveInputs puts the values back in the claimed jobs' inputs where the
// engine placed references: the whole input (a run's input) or one entry
// per subscribed event.
func (a *API) resolveInputs(ctx context.Context, jobs []store.Job) error {
	if a.data == nil {
		return nil
	}
	for i := range jobs {
		in := jobs[i].Input
		if !bytes.Contains(in, []byte(refKey)) {
			continue
		}
		if ref, ok := parseRef(in); ok {
			v, err := a.data.GetData(ctx, ref)
			if err != nil {
				return err
			}
			jobs[i].Input = v
			continue
		}
		var entries map[string]json.RawMessage
		if json.Unmarshal(in, &entries) != nil {
			continue
		}
		for k, raw := range entries {
			if ref, ok := parseRef(raw); ok {
				v, err := a.data.GetData(ctx, ref)
				if err != nil {
					return err
				}
				entries[k] = v
			}
		}
		resolved, err := json.Marshal(entries)
		if err != nil {
			return err
		}
		jobs[i].Input = resolved
	}
	return nil
}

// errNoData answers the data route on a server without a DataStore.
var errNoData = &nqd.Error{Code: nqd.CodeNotFound,
	Message: "This server keeps no step data by reference: set NQ_ARCHIVE_URL (or NQ_ARCHIVE_DIR)."}

// getData answers a reference's url with the value it names.
func (a *API) getData(w http.ResponseWriter, r *http.Request) error {
	if a.data == nil {
		return errNoData
	}
	if chi.URLParam(r, "type") != "flow" {
		return nqd.Errorf(nqd.CodeNotFound, "Step data belongs to flow runs.")
	}
	run, sum := chi.URLParam(r, "id"), chi.URLParam(r, "sha256")
	if !event.ValidContextID(run) {
		return invalidField("id", "must be a run id")
	}
	// The size is not in the URL: GetData reads what is there and checks
	// it against the hash alone, bounded by the largest body it came in.
	v, err := a.data.GetData(r.Context(), archive.Ref{RunID: run, SHA256: sum, Bytes: -1})
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(v)))
	_, _ = w.Write(v)
	return nil
}

// claimResolved claims up to n jobs (one when n is 0) with claim, their
// inputs resolved. With a DataStore it claims them one at a time and stops
// adding jobs once their inputs reach Limits.ClaimBytes: an input kept by
// reference may be as large as a request body, and an answer holds every
// job's. A job over the budget still goes, alone. Only the first claim
// waits.
func (a *API) claimResolved(ctx context.Context, claim claimFunc, queues []string, n int, wait time.Duration) ([]store.Job, error) {
	if a.data == nil {
		return a.claim(ctx, claim, queues, n, wait)
	}
	jobs := []store.Job{}
	var total int64
	for len(jobs) < max(n, 1) && total < a.limits.ClaimBytes {
		got, err := a.claim(ctx, claim, queues, 1, wait)
		if err == nil {
			err = a.resolveInputs(ctx, got)
		}
		if err != nil && len(jobs) == 0 {
			return nil, err
		}
		if err != nil {
			// The jobs claimed so far go out; this one returns to its
			// queue when its lease runs out.
			a.log.Warn().Err(err).Msg("a claim stopped early")
			break
		}
		if len(got) == 0 {
			break
		}
		jobs = append(jobs, got...)
		for _, j := range got {
			total += int64(len(j.Input))
		}
		wait = 0
	}
	return jobs, nil
}

// runsWithData lists the runs of flow, before a clear deletes them, when
// their values could be kept by reference. Nil without a DataStore.
func (a *API) runsWithData(ctx context.Context, flow string) (map[string]bool, error) {
	if a.data == nil {
		return nil, nil
	}
	const page = 1000
	runs := map[string]bool{}
	for offset := 0; ; offset += page {
		p, err := a.engine.Runs(ctx, flow, "", offset, page)
		if err != nil {
			return nil, err
		}
		for _, m := range p.Runs {
			runs[m.RunID] = true
		}
		if len(p.Runs) < page {
			return runs, nil
		}
	}
}

// dropData deletes the values of runs that a clear deleted from the store
// without archiving them: no event refers to them any more. A run whose
// stream has events again (a keyed start of the same run since) keeps its
// values, and so does one with an archive (DeleteData). Failures are
// logged: the clear stands, and the values are only space.
func (a *API) dropData(ctx context.Context, log *zerolog.Logger, runs map[string]bool) {
	if len(runs) == 0 {
		return
	}
	refs, err := a.data.ListData(ctx)
	if err != nil {
		log.Warn().Err(err).Msg("the values of the cleared runs stay in the bucket: it could not be listed")
		return
	}
	done := map[string]bool{}
	for _, ref := range refs {
		if !runs[ref.RunID] || done[ref.RunID] {
			continue
		}
		done[ref.RunID] = true
		evs, err := a.store.Range(ctx, store.Context{Type: "flow", ID: ref.RunID}, store.RangeQuery{Limit: 1})
		if err != nil || len(evs) > 0 {
			continue
		}
		if _, err := a.data.DeleteData(ctx, ref.RunID); err != nil {
			log.Warn().Err(err).Str("run", ref.RunID).Msg("the values of a cleared run stay in the bucket")
		}
	}
}
