package handlers

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog/hlog"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/reducers"
	"github.com/nqd-dev/nqd/registry"
	"github.com/nqd-dev/nqd/store"
)

// The headers an HTTP worker names itself by (docs/worker-protocol.md). All
// are optional; a worker without Nqd-Worker-Id is listed under an id made
// from its address and User-Agent.
const (
	headerWorkerID          = "Nqd-Worker-Id"
	headerWorkerName        = "Nqd-Worker-Name"
	headerWorkerSDK         = "Nqd-Worker-Sdk"
	headerWorkerVersion     = "Nqd-Worker-Version"
	headerWorkerHost        = "Nqd-Worker-Host"
	headerWorkerConcurrency = "Nqd-Worker-Concurrency"
)

// workerFields name the headers in a validation error by the hello field
// each carries.
var workerFields = map[string]string{
	"id": headerWorkerID, "name": headerWorkerName, "sdk": headerWorkerSDK,
	"version": headerWorkerVersion, "host": headerWorkerHost, "concurrency": headerWorkerConcurrency,
}

// httpHello is the hello an HTTP worker's claim says: its headers, the
// queues it claims from. Errors: a validation error naming the header.
func httpHello(r *http.Request, queues []string) (registry.Hello, error) {
	h := registry.Hello{
		ID: r.Header.Get(headerWorkerID), Name: r.Header.Get(headerWorkerName),
		SDK: r.Header.Get(headerWorkerSDK), Version: r.Header.Get(headerWorkerVersion),
		Host: r.Header.Get(headerWorkerHost), Queues: queues, Transport: registry.TransportHTTP,
	}
	if c := r.Header.Get(headerWorkerConcurrency); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil {
			return h, invalidField(headerWorkerConcurrency, "must be a whole number between 0 and "+strconv.Itoa(registry.MaxConcurrency))
		}
		h.Concurrency = n
	}
	if h.ID == "" {
		// Same address, same client: most likely the same process.
		sum := sha256.Sum256([]byte(clientAddr(r) + "\x00" + r.UserAgent()))
		h.ID = "http-" + hex.EncodeToString(sum[:6])
		if h.Name == "" {
			h.Name = printable(r.UserAgent(), 128)
		}
	}
	if err := registry.Check(h); err != nil {
		// Name the header that broke the rule, not the hello's field.
		var ne *nqd.Error
		if errors.As(err, &ne) {
			for f, rule := range ne.Fields {
				if hd, ok := workerFields[f]; ok {
					return h, invalidField(hd, rule)
				}
			}
		}
		return h, err
	}
	return h, nil
}

// printable is s cut to at most n bytes of printable ASCII, other bytes
// dropped: a User-Agent shown as a worker's name.
func printable(s string, n int) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < n; i++ {
		if c := s[i]; c >= 0x20 && c < 0x7f {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// noteClaim registers the worker whose claim r is. A claim asks for its
// worker's free slots, so its concurrency less those is what it runs. The
// registry is for watching: a store error there is logged, and the claim
// goes on.
func (a *API) noteClaim(r *http.Request, queues []string, asked int) error {
	if a.workers == nil {
		return nil
	}
	h, err := httpHello(r, queues)
	if err != nil {
		return err
	}
	inFlight := 0
	if h.Concurrency > 0 {
		inFlight = max(h.Concurrency-max(asked, 1), 0)
	}
	if err := a.workers.Seen(r.Context(), h, inFlight); err != nil {
		hlog.FromRequest(r).Warn().Err(err).Str("worker", h.ID).Msg("worker registry: recording a claim failed")
	}
	return nil
}

// touchWorker notes that the worker named by a job call's Nqd-Worker-Id is
// alive, which keeps a worker whose slots are all busy (so it claims
// nothing) from being taken for lost.
func (a *API) touchWorker(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get(headerWorkerID); a.workers != nil && id != "" {
			err := a.workers.Beat(r.Context(), id, -1)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				hlog.FromRequest(r).Warn().Err(err).Str("worker", id).Msg("worker registry: recording a job call failed")
			}
		}
		next.ServeHTTP(w, r)
	})
}

type goodbyeRequest struct{}

// workerGoodbye answers POST /api/_workers/goodbye: an HTTP worker that
// stops says so, and the registry shows it left (closed) at once rather
// than lost once it has been silent long enough.
func (a *API) workerGoodbye(w http.ResponseWriter, r *http.Request) error {
	var req goodbyeRequest
	if err := a.decodeBody(w, r, &req); err != nil {
		return err
	}
	id := r.Header.Get(headerWorkerID)
	if id == "" {
		return invalidField(headerWorkerID, "required: the id the worker's claims carried")
	}
	if a.workers != nil {
		if err := a.workers.Leave(r.Context(), id, registry.ReasonClosed); err != nil {
			var ne *nqd.Error
			if errors.As(err, &ne) && ne.Fields["id"] != "" {
				return invalidField(headerWorkerID, ne.Fields["id"])
			}
			return err
		}
	}
	writeJSON(w, r, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// staleAfter is how long an active worker may go without a registry event
// before it is shown lost.
func (a *API) staleAfter() time.Duration {
	if a.workers != nil {
		return a.workers.StaleAfter()
	}
	return registry.StaleAfter(0, 0)
}

// errNoWorkerRegistry answers the list on a server built without state reads.
var errNoWorkerRegistry = &nqd.Error{Code: nqd.CodeNotFound, Message: "This server keeps no worker registry."}

// workerStatusRule is the 400 message for a bad status filter.
const workerStatusRule = "must be active, left or lost"

type workersBody struct {
	Workers []reducers.Worker `json:"workers"`
	// Count is len(Workers); Active counts the connected workers among them.
	Count       int    `json:"count"`
	Active      int    `json:"active"`
	LastEventID string `json:"lastEventId,omitempty"`
}

// listWorkers answers GET /api/_workers: the registry's workers, those
// that left within its retention too, filtered by status and queue, as of
// `at` when given.
func (a *API) listWorkers(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	status, queue := q.Get("status"), q.Get("queue")
	switch status {
	case "", reducers.WorkerActive, reducers.WorkerLeft, reducers.WorkerLost:
	default:
		return invalidField("status", workerStatusRule)
	}
	if queue != "" && !event.ValidName(queue) {
		return invalidField("queue", event.NameRule)
	}
	at, err := pointParam(q, "at", event.MaxID)
	if err != nil {
		return err
	}
	if a.state == nil {
		return errNoWorkerRegistry
	}
	s, err := registry.State(r.Context(), a.state, at)
	if err != nil {
		return err
	}
	asOf := a.now()
	if at != event.MaxID {
		asOf = at.Time()
	}
	out := workersBody{Workers: []reducers.Worker{}}
	for _, wk := range s.WorkersSeen(asOf.Add(-a.staleAfter())) {
		if status != "" && wk.Status != status || queue != "" && !slices.Contains(wk.Queues, queue) {
			continue
		}
		out.Workers = append(out.Workers, wk)
		if wk.Status == reducers.WorkerActive {
			out.Active++
		}
	}
	out.Count = len(out.Workers)
	if s.Count() > 0 {
		out.LastEventID = s.Position().String()
	}
	writeJSON(w, r, http.StatusOK, out)
	return nil
}
