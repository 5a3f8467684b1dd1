package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/hlog"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// The worker protocol: a worker in any language claims jobs over HTTP,
// reports progress as events, heartbeats to keep its lease, and completes or
// fails the job. Every call after the claim sends the lease the claim gave.

// MaxClaimWait bounds a long-polling claim: an idle HTTP worker calls at
// least this often, which the worker registry's lost timeout must allow.
const MaxClaimWait = 30 * time.Second

type claimRequest struct {
	Queues []string `json:"queues" validate:"required,min=1,max=32,dive,key_name"`
	Max    int      `json:"max" validate:"gte=0,lte=100"`
	WaitMs int64    `json:"waitMs" validate:"gte=0"`
}

// errShuttingDown answers a claim while the server shuts down.
var errShuttingDown = &nqd.Error{Code: nqd.CodeUnavailable,
	Message: "The server is shutting down; claim again after Retry-After, here or on another instance."}

type claimBody struct {
	Jobs []store.Job `json:"jobs"`
}

// claimJobs answers at once when work is ready, otherwise when some appears
// or waitMs (at most 30 s) has passed, with an empty list.
func (a *API) claimJobs(w http.ResponseWriter, r *http.Request) error {
	var req claimRequest
	if err := a.decodeBody(w, r, &req); err != nil {
		return err
	}
	if err := a.noteClaim(r, req.Queues, req.Max); err != nil {
		return err
	}
	wait := min(time.Duration(req.WaitMs)*time.Millisecond, MaxClaimWait)
	jobs, err := a.claimResolved(r.Context(), a.engine.Claim, req.Queues, req.Max, wait)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, claimBody{Jobs: jobs})
	return nil
}

// claimFunc is one of the engine's claims: Claim, or ClaimHanded.
type claimFunc func(ctx context.Context, queues []string, max int, wait time.Duration) ([]store.Job, error)

// claim claims up to n jobs of queues (one when n is 0) with claim, waiting
// up to wait for some to appear, and answers an empty list rather than nil.
// While the server shuts down it claims nothing and fails with
// errShuttingDown; a claim that waits ends when the shutdown begins.
func (a *API) claim(ctx context.Context, claim claimFunc, queues []string, n int, wait time.Duration) ([]store.Job, error) {
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(a.closing, cancel)()
	}
	var jobs []store.Job
	err := a.closing.Err()
	if err == nil {
		jobs, err = claim(ctx, queues, max(n, 1), wait)
	}
	if err != nil && a.closing.Err() != nil {
		return nil, errShuttingDown
	}
	if err != nil {
		return nil, err
	}
	if jobs == nil {
		jobs = []store.Job{}
	}
	return jobs, nil
}

// decodeBody reads a strict JSON body into v and validates it.
func (a *API) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if err := decodeStrict(http.MaxBytesReader(w, r.Body, a.limits.MaxBodyBytes), v, ""); err != nil {
		return err
	}
	return a.validateStruct(v, "")
}

func jobAck(r *http.Request, lease string) (store.JobAck, error) {
	id := chi.URLParam(r, "jobId")
	// chi matches the escaped path, so a client that escapes the colon of
	// <runId>:<step> (as URL builders do) must find the same job.
	if u, err := url.PathUnescape(id); err == nil {
		id = u
	}
	return jobOf(chi.URLParam(r, "queue"), id, lease)
}

// jobOf names the job id of queue q held under lease, as a worker's report
// gives them (in the URL, or in a channel frame).
func jobOf(q, id, lease string) (store.JobAck, error) {
	if !event.ValidName(q) {
		return store.JobAck{}, invalidField("queue", "must be a queue name")
	}
	run, step, ok := strings.Cut(id, ":")
	if !ok || !event.ValidContextID(run) || !event.ValidName(step) {
		return store.JobAck{}, invalidField("jobId", "must be <runId>:<step>")
	}
	if lease == "" {
		return store.JobAck{}, invalidField("lease", "required")
	}
	return store.JobAck{Queue: q, ID: id, Lease: lease}, nil
}

// leased is a worker's request about a job it holds.
type leased interface{ lease() string }

// decodeJob reads a worker's request about the job in the URL into req and
// names the job and the lease it holds.
func (a *API) decodeJob(w http.ResponseWriter, r *http.Request, req leased) (store.JobAck, error) {
	if err := a.decodeBody(w, r, req); err != nil {
		return store.JobAck{}, err
	}
	return jobAck(r, req.lease())
}

type leaseRequest struct {
	Lease string `json:"lease" validate:"required,max=128"`
}

func (q *leaseRequest) lease() string { return q.Lease }

func (a *API) heartbeatJob(w http.ResponseWriter, r *http.Request) error {
	var req leaseRequest
	ack, err := a.decodeJob(w, r, &req)
	if err != nil {
		return err
	}
	beat, err := a.engine.Heartbeat(r.Context(), ack)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, beat)
	return nil
}

type reportRequest struct {
	Lease  string            `json:"lease" validate:"required,max=128"`
	Events []json.RawMessage `json:"events" validate:"required,min=1,max=1000"`
}

func (q *reportRequest) lease() string { return q.Lease }

type reportBody struct {
	Events []event.Event `json:"events"`
}

// reportJob appends progress events: step.started, log, emit, state.* and
// the like. The engine fills in run, flow, step and attempt. An
// Idempotency-Key makes a retried report store its events once.
func (a *API) reportJob(w http.ResponseWriter, r *http.Request) error {
	var req reportRequest
	opts, err := idempotencyOptions(r)
	if err != nil {
		return err
	}
	ack, err := a.decodeJob(w, r, &req)
	if err != nil {
		return err
	}
	body, err := a.report(r.Context(), ack, req.Events, opts.IdempotencyKey)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, body)
	return nil
}

// The worker's reports whatever carries them: the HTTP routes here and the
// worker channel (workerchannel.go) decode a request and name its job, then
// call report, completeReport and failReport (and the engine's Heartbeat),
// so that both store alike and answer alike.

// report stores the progress events raws of the job of ack; a repeat with
// the same key stores nothing new.
func (a *API) report(ctx context.Context, ack store.JobAck, raws []json.RawMessage, key string) (reportBody, error) {
	evs, err := a.decodeEvents(ctx, ack, raws)
	if err != nil {
		return reportBody{}, err
	}
	stored, err := a.engine.Report(ctx, ack, evs, key)
	if err != nil {
		return reportBody{}, err
	}
	if stored == nil {
		stored = []event.Event{}
	}
	return reportBody{Events: stored}, nil
}

// decodeEvents reads the events a worker reports about the job of ack,
// each within the size limit of an appended event once a large emit
// payload went by reference (data.go).
func (a *API) decodeEvents(ctx context.Context, ack store.JobAck, raws []json.RawMessage) ([]event.Event, error) {
	run, _, _ := strings.Cut(ack.ID, ":")
	evs := make([]event.Event, 0, len(raws))
	for i, raw := range raws {
		name := "events[" + strconv.Itoa(i) + "]"
		big := int64(len(raw)) > a.limits.MaxEventBytes
		if big && a.data == nil {
			return nil, a.dataTooLarge(name)
		}
		ev, err := a.decodeEvent(raw, run, name+".")
		if err == nil {
			ev, err = a.offloadEmit(ctx, run, ev)
		}
		if err != nil {
			return nil, err
		}
		if big {
			if b, err := ev.MarshalJSON(); err != nil || int64(len(b)) > a.limits.MaxEventBytes {
				return nil, eventTooLarge(name, a.limits.MaxEventBytes)
			}
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// dataTooLarge is the 413 of step data over the event limit on a server
// that cannot keep it by reference.
func (a *API) dataTooLarge(what string) *nqd.Error {
	e := eventTooLarge(what, a.limits.MaxEventBytes)
	e.Message += " Set NQ_ARCHIVE_URL (or NQ_ARCHIVE_DIR) to pass larger step data by reference."
	return e
}

// completeRequest and failRequest may carry the job's last progress events
// (emits excepted), stored with the outcome in one atomic step: a quick step
// then costs one call after its claim.
type completeRequest struct {
	Lease  string            `json:"lease" validate:"required,max=128"`
	Result json.RawMessage   `json:"result"`
	Events []json.RawMessage `json:"events" validate:"max=1000"`
	Claim  *nextClaim        `json:"claim"`
}

// nextClaim asks a completion to claim the worker's next jobs once the job
// is completed, as a claim does: a worker that keeps busy then needs no
// claim call of its own between jobs. WaitMs (at most a second, well
// within the API timeout the completion runs under) lets the answer wait
// for a job started, or made ready by an emit, meanwhile on this instance,
// handed to the completion (engine/handoff.go); while it waits it does not
// look at the store again (engine.ClaimHanded), so that many completions
// can wait at once.
type nextClaim struct {
	Queues []string `json:"queues" validate:"required,min=1,max=32,dive,key_name"`
	Max    int      `json:"max" validate:"gte=0,lte=100"`
	WaitMs int64    `json:"waitMs" validate:"gte=0,lte=1000"`
}

// completeBody answers a completion that asked for a claim; one that did
// not gets statusBody, as before claims rode on completions.
type completeBody struct {
	Status string      `json:"status"`
	Jobs   []store.Job `json:"jobs"`
}

func (q *completeRequest) lease() string { return q.Lease }

func (a *API) completeJob(w http.ResponseWriter, r *http.Request) error {
	var req completeRequest
	ack, err := a.decodeJob(w, r, &req)
	if err != nil {
		return err
	}
	var next *engine.Next
	if req.Claim != nil {
		next = &engine.Next{Queues: req.Claim.Queues, Max: req.Claim.Max}
	}
	jobs, claimed, err := a.completeReport(r.Context(), ack, &req, next)
	if err != nil {
		return err
	}
	if req.Claim == nil {
		writeJSON(w, r, http.StatusOK, statusBody{Status: "ok"})
		return nil
	}
	if claimed && len(jobs) > 0 {
		if err := a.resolveInputs(r.Context(), jobs); err != nil {
			// The completion stands; the jobs go back to their queues when
			// their leases run out.
			hlog.FromRequest(r).Error().Err(err).Msg("the input of a claimed job could not be read from the bucket")
			jobs = []store.Job{}
		}
	} else {
		wait := min(time.Duration(req.Claim.WaitMs)*time.Millisecond, a.limits.RequestTimeout/2)
		jobs = a.claimNext(r.Context(), *hlog.FromRequest(r), req.Claim.Queues, req.Claim.Max, wait)
	}
	writeJSON(w, r, http.StatusOK, completeBody{Status: "ok", Jobs: jobs})
	return nil
}

// completeReport stores the completion req of the job of ack. With next,
// unless the server shuts down, it claims next's jobs in the completion's
// own write where the store can (claimed then says so).
func (a *API) completeReport(ctx context.Context, ack store.JobAck, req *completeRequest, next *engine.Next) (jobs []store.Job, claimed bool, err error) {
	evs, err := a.decodeEvents(ctx, ack, req.Events)
	if err == nil {
		run, _, _ := strings.Cut(ack.ID, ":")
		req.Result, err = a.offload(ctx, run, req.Result)
	}
	if err == nil && int64(len(req.Result)) > a.limits.MaxEventBytes {
		err = a.dataTooLarge("The result")
	}
	if err != nil {
		return nil, false, err
	}
	if next == nil || a.closing.Err() != nil {
		return nil, false, a.engine.Complete(ctx, ack, req.Result, evs...)
	}
	n := *next
	if a.data != nil {
		// One job in the completion's write, whose input may be large; a
		// claim after it takes more within the answer's budget.
		n.Max = 1
	}
	return a.engine.CompleteClaiming(ctx, ack, req.Result, n, evs...)
}

// claimNext claims up to n jobs of queues for the slots a completion
// freed, when the completion's own write took none: waiting up to wait to
// be handed a job started (or made ready by an emit) on this instance
// meanwhile, without looking at the store again (engine.ClaimHanded), so
// that every slot of every worker can wait at once. The HTTP completion's
// claim and the worker channel's next both claim here. The completion is
// stored by then, so a claim that fails (or a server shutting down)
// answers no jobs rather than an error: the slots are free as before.
func (a *API) claimNext(ctx context.Context, log zerolog.Logger, queues []string, n int, wait time.Duration) []store.Job {
	jobs, err := a.claimResolved(ctx, a.engine.ClaimHanded, queues, n, wait)
	if err != nil {
		if !errors.Is(err, errShuttingDown) && ctx.Err() == nil {
			log.Warn().Err(err).Msg("the claim of a completion failed; the completion stands")
		}
		return []store.Job{}
	}
	return jobs
}

type failRequest struct {
	Lease     string            `json:"lease" validate:"required,max=128"`
	Error     string            `json:"error" validate:"required,max=4096"`
	Retriable *bool             `json:"retriable"`
	Events    []json.RawMessage `json:"events" validate:"max=1000"`
}

func (q *failRequest) lease() string { return q.Lease }

func (a *API) failJob(w http.ResponseWriter, r *http.Request) error {
	var req failRequest
	ack, err := a.decodeJob(w, r, &req)
	if err == nil {
		err = a.failReport(r.Context(), ack, &req)
	}
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, statusBody{Status: "ok"})
	return nil
}

// failReport stores the failure req of the job of ack.
func (a *API) failReport(ctx context.Context, ack store.JobAck, req *failRequest) error {
	evs, err := a.decodeEvents(ctx, ack, req.Events)
	if err != nil {
		return err
	}
	return a.engine.Fail(ctx, ack, req.Error, req.Retriable, evs...)
}
