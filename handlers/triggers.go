package handlers

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog/hlog"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/schedule"
	"github.com/nqd-dev/nqd/scheduler"
	"github.com/nqd-dev/nqd/triggers"
)

// WebhookRefusals counts the webhook calls refused for want of a
// credential (see metrics.Metrics.WebhookRefused).
type WebhookRefusals interface {
	WebhookRefused(webhook, reason string)
}

// webhookMethods are the methods the webhook routes answer: any the caller
// may use, as the original's handlers took every method.
var webhookMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// TriggerIDHeader carries the trigger id of the await a call to an await
// webhook resolves: its credential.
const TriggerIDHeader = "X-Nqd-Trigger-Id"

// inBodyError is a refusal the v0.5 UI reads from a 200: it tests
// `'error' in response`.
type inBodyError struct {
	Error      string            `json:"error"`
	StatusCode int               `json:"statusCode"`
	Fields     map[string]string `json:"fields,omitempty"`
}

// serveInBody adapts h as serve does, but answers h's error in a 200 as
// {error, statusCode}.
func serveInBody(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		e := toError(err)
		status := statusOf(e.Code)
		if status >= http.StatusInternalServerError {
			hlog.FromRequest(r).Error().Err(err).Int("status", status).Msg("request failed")
		} else {
			hlog.FromRequest(r).Debug().Err(err).Int("status", status).Msg("request rejected")
		}
		writeJSON(w, r, http.StatusOK, inBodyError{Error: e.Message, StatusCode: status, Fields: e.Fields})
	}
}

// errNoRegistry answers the trigger routes of an API built without one.
var errNoRegistry = &nqd.Error{Code: nqd.CodeNotFound, Message: "This server has no trigger registry."}

func (a *API) registry() (*triggers.Registry, error) {
	if a.triggers == nil {
		return nil, errNoRegistry
	}
	return a.triggers, nil
}

// namedTrigger is the registry and the name of the trigger a route names.
func (a *API) namedTrigger(r *http.Request) (*triggers.Registry, string, error) {
	g, err := a.registry()
	if err != nil {
		return nil, "", err
	}
	name, err := triggerName(r)
	return g, name, err
}

func triggerName(r *http.Request) (string, error) {
	name := chi.URLParam(r, "name")
	if !triggers.ValidName(name) {
		return "", invalidField("name", triggers.NameRule)
	}
	return name, nil
}

func (a *API) listTriggers(w http.ResponseWriter, r *http.Request) error {
	g, err := a.registry()
	if err != nil {
		return err
	}
	ts, err := g.List(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, ts)
	return nil
}

func (a *API) getTrigger(w http.ResponseWriter, r *http.Request) error {
	g, name, err := a.namedTrigger(r)
	if err != nil {
		return err
	}
	t, err := g.Get(r.Context(), name)
	if err != nil {
		return err
	}
	if t.Webhook != nil {
		t.Webhook.FullURL = origin(r) + triggers.WebhookPath(t.Name)
	}
	writeJSON(w, r, http.StatusOK, t)
	return nil
}

// origin is the scheme and host the request came to.
func origin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func (a *API) summarizeTriggers(w http.ResponseWriter, r *http.Request) error {
	g, err := a.registry()
	if err != nil {
		return err
	}
	s, err := g.Summarize(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, s)
	return nil
}

// maxEventTypes bounds the kinds an events page may filter by.
const maxEventTypes = 32

func (a *API) triggerEvents(w http.ResponseWriter, r *http.Request) error {
	g, name, err := a.namedTrigger(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit, err := intParam(q, "limit", defaultListLimit, 1, triggers.MaxEventScan/10)
	if err != nil {
		return err
	}
	offset, err := intParam(q, "offset", 0, 0, triggers.MaxEventScan)
	if err != nil {
		return err
	}
	var types []string
	if v := q.Get("types"); v != "" {
		for _, k := range strings.Split(v, ",") {
			if k = strings.TrimSpace(k); k == "" {
				continue
			}
			if !event.ValidKind(k) || len(types) == maxEventTypes {
				return invalidField("types", "a comma-separated list of at most 32 event kinds; each "+event.KindRule)
			}
			types = append(types, k)
		}
	}
	page, err := g.Events(r.Context(), name, triggers.EventQuery{Limit: limit, Offset: offset, Types: types})
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, page)
	return nil
}

// savedBody answers a create or update: the trigger, and the webhook
// secret nqd generated for it, told this once.
type savedBody struct {
	Success bool        `json:"success"`
	Trigger savedFields `json:"trigger"`
}

type savedFields struct {
	triggers.Trigger
	CreatedAt string `json:"createdAt,omitempty"`
	// Subscriptions is the flow names, as the create answer gives them.
	Subscriptions []string `json:"subscriptions"`
	Secret        string   `json:"secret,omitempty"`
}

func saved(s triggers.Saved, created bool) savedBody {
	f := savedFields{Trigger: s.Trigger, Subscriptions: s.Trigger.SubscribedFlows, Secret: s.Secret}
	if created {
		f.CreatedAt = s.Trigger.RegisteredAt
	}
	return savedBody{Success: true, Trigger: f}
}

// principalName names who registers a trigger: the API token's name.
func principalName(r *http.Request) string {
	if p, err := auth.FromContext(r.Context()); err == nil {
		return p.Name
	}
	return ""
}

func (a *API) createTrigger(w http.ResponseWriter, r *http.Request) error {
	g, err := a.registry()
	if err != nil {
		return err
	}
	var sp triggers.Spec
	if err := decodeStrict(http.MaxBytesReader(w, r.Body, a.limits.MaxBodyBytes), &sp, ""); err != nil {
		return err
	}
	sp.RegisteredBy = principalName(r)
	s, err := g.Create(r.Context(), sp)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, saved(s, true))
	return nil
}

func (a *API) patchTrigger(w http.ResponseWriter, r *http.Request) error {
	g, name, err := a.namedTrigger(r)
	if err != nil {
		return err
	}
	var p triggers.Patch
	if err := decodeStrict(http.MaxBytesReader(w, r.Body, a.limits.MaxBodyBytes), &p, ""); err != nil {
		return err
	}
	s, err := g.Update(r.Context(), name, p)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, saved(s, false))
	return nil
}

type deletedBody struct {
	Success bool   `json:"success"`
	Message string `json:"message"`
}

func (a *API) deleteTrigger(w http.ResponseWriter, r *http.Request) error {
	g, name, err := a.namedTrigger(r)
	if err != nil {
		return err
	}
	if err := g.Delete(r.Context(), name); err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, deletedBody{Success: true, Message: "Trigger '" + name + "' deleted"})
	return nil
}

// firedBody answers a fire: the original's webhook answer, with the runs
// the fire started.
type firedBody struct {
	Success         bool              `json:"success"`
	TriggerName     string            `json:"triggerName"`
	SubscribedFlows []string          `json:"subscribedFlows"`
	Message         string            `json:"message"`
	Timestamp       string            `json:"timestamp"`
	FireID          string            `json:"fireId"`
	Runs            map[string]string `json:"runs"`
	Failed          map[string]string `json:"failed,omitempty"`
}

func firedAnswer(f triggers.Fired) firedBody {
	return firedBody{Success: true, TriggerName: f.TriggerName, SubscribedFlows: f.SubscribedFlows,
		Message: "Trigger fired successfully", Timestamp: f.At.UTC().Format(event.TimeFormat), FireID: f.FireID,
		Runs: f.Started, Failed: f.Failed}
}

// readPayload reads a fire's payload: the JSON body, {} when there is
// none or the method carries none.
func (a *API) readPayload(w http.ResponseWriter, r *http.Request) (json.RawMessage, error) {
	if r.Method == http.MethodGet {
		return json.RawMessage(`{}`), nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.limits.MaxEventBytes))
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return json.RawMessage(`{}`), nil
	}
	if err := checkJSONText(body, "payload"); err != nil {
		return nil, err
	}
	if !json.Valid(body) {
		return nil, badRequest("The body must be JSON, the fire's payload.")
	}
	return body, nil
}

// source is where a fire came from, recorded in trigger.fired: the
// caller's address and the headers that cannot carry a credential.
func (a *API) source(r *http.Request, secretHeader string) map[string]any {
	src := triggerSource(r)
	for name := range src.Headers {
		if strings.EqualFold(name, secretHeader) || strings.EqualFold(name, TriggerIDHeader) {
			delete(src.Headers, name)
		}
	}
	return map[string]any{"addr": src.Addr, "headers": src.Headers, "route": r.URL.Path}
}

// fireRegistered fires any active trigger by hand, with an API token's
// write scope as its credential.
func (a *API) fireRegistered(w http.ResponseWriter, r *http.Request) error {
	g, name, err := a.namedTrigger(r)
	if err != nil {
		return err
	}
	payload, err := a.readPayload(w, r)
	if err != nil {
		return err
	}
	f, err := g.Fire(r.Context(), name, payload, "", a.source(r, ""))
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, firedAnswer(f))
	return nil
}

// hasWriteToken reports whether the call carries an API token with write
// scope, a credential for any webhook. With no tokens configured nobody
// has one: an open server does not make webhooks open.
func hasWriteToken(r *http.Request) bool {
	p, err := auth.FromContext(r.Context())
	return err == nil && !p.Open && p.Allows(auth.Write) == nil
}

// refuseWebhook logs and counts a webhook call refused for want of a
// credential. It never logs the credential.
func (a *API) refuseWebhook(r *http.Request, webhook, reason, message string) error {
	hlog.FromRequest(r).Warn().Str("webhook", webhook).Str("reason", reason).Str("path", r.URL.Path).
		Str("addr", clientIPOf(r)).Msg("webhook call refused")
	if a.refusals != nil {
		a.refusals.WebhookRefused(webhook, reason)
	}
	return &nqd.Error{Code: nqd.CodeUnauthorized, Message: message}
}

// webhookTrigger fires a webhook trigger, `ANY /api/_webhook/trigger/{name}`.
// A trigger that requires auth takes its secret in its header; one that
// does not is fired only by an API token's write scope, unless the
// operator opened webhooks (NQ_ALLOW_OPEN_WEBHOOKS).
func (a *API) webhookTrigger(w http.ResponseWriter, r *http.Request) error {
	g, name, err := a.namedTrigger(r)
	if err != nil {
		return err
	}
	t, err := g.Get(r.Context(), name)
	if err != nil {
		return err
	}
	switch {
	case t.Type != triggers.TypeWebhook:
		return badRequest("Invalid trigger type: %s is a %s trigger, not a webhook.", name, t.Type)
	case t.Status != triggers.StatusActive:
		return nqd.Refine(triggers.ErrNotActive, "Trigger not active: %s is %s.", name, t.Status)
	case r.Method != t.Webhook.Method:
		w.Header().Set("Allow", t.Webhook.Method)
		return nqd.Errorf(nqd.CodeMethodNotAllowed, "Method not allowed: the trigger takes %s.", t.Webhook.Method)
	}
	header := ""
	if t.Webhook.Auth != nil {
		header = t.Webhook.Auth.Header
	}
	switch {
	case header != "" && t.CheckSecret(r.Header.Get(header)):
	case hasWriteToken(r):
	case header != "" && r.Header.Get(header) == "":
		return a.refuseWebhook(r, "trigger", "missing_secret", "This trigger needs its secret in the "+header+" header.")
	case header != "":
		return a.refuseWebhook(r, "trigger", "bad_secret", "The "+header+" header does not hold this trigger's secret.")
	case !a.openWebhooks:
		return a.refuseWebhook(r, "trigger", "no_secret",
			"This webhook trigger has no secret: set requireAuth on it (nqd then gives it one), call with an API token, or let nqd take open webhooks with NQ_ALLOW_OPEN_WEBHOOKS.")
	}
	payload := json.RawMessage(`{"triggerName":` + string(mustJSON(name)) + `}`)
	if r.Method != http.MethodGet {
		if payload, err = a.readPayload(w, r); err != nil {
			return err
		}
	}
	f, err := g.Fire(r.Context(), name, payload, "", a.source(r, header))
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, firedAnswer(f))
	return nil
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

type awaitResolvedBody struct {
	Success  bool   `json:"success"`
	RunID    string `json:"runId"`
	StepName string `json:"stepName"`
	FlowName string `json:"flowName"`
	Message  string `json:"message"`
}

// webhookAwait resolves the webhook await of a run's step,
// `ANY /api/_webhook/await/{flow}/{runId}/{step}`, as a call to the
// await's trigger would: its credential is the await's trigger id in the
// X-Nqd-Trigger-Id header, or an API token's write scope, or none when the
// operator opened webhooks.
func (a *API) webhookAwait(w http.ResponseWriter, r *http.Request) error {
	flow, run, step := chi.URLParam(r, "flow"), chi.URLParam(r, "runId"), chi.URLParam(r, "step")
	if !event.ValidName(flow) || !event.ValidContextID(run) || !event.ValidName(step) {
		return badRequest("Invalid webhook path: flow, run id and step must be valid names.")
	}
	id, err := a.engine.StepTrigger(r.Context(), flow, run, step)
	if err != nil {
		return err
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return nqd.Errorf(nqd.CodeMethodNotAllowed, "Method Not Allowed: an await webhook takes POST.")
	}
	given := r.Header.Get(TriggerIDHeader)
	switch {
	case given != "" && subtle.ConstantTimeCompare([]byte(given), []byte(id)) == 1:
	case hasWriteToken(r):
	case given != "":
		return a.refuseWebhook(r, "await", "bad_secret", "The "+TriggerIDHeader+" header does not hold this await's trigger id.")
	case !a.openWebhooks:
		return a.refuseWebhook(r, "await", "no_secret",
			"An await webhook needs the await's trigger id in the "+TriggerIDHeader+" header or an API token; or let nqd take open webhooks with NQ_ALLOW_OPEN_WEBHOOKS.")
	}
	payload, err := a.readPayload(w, r)
	if err != nil {
		return err
	}
	src := triggerSource(r)
	delete(src.Headers, TriggerIDHeader)
	out, err := a.engine.FireTrigger(r.Context(), id, payload, src)
	if err != nil {
		return err
	}
	if out.Replayed {
		return nqd.Refine(engine.ErrTriggerGone, "Step is not awaiting")
	}
	writeJSON(w, r, http.StatusOK, awaitResolvedBody{Success: true, RunID: run, StepName: step, FlowName: flow,
		Message: "Webhook processed successfully. Flow will resume shortly."})
	return nil
}

// scheduledJob is a job of the scheduler page: a schedule trigger or a
// pending time await. Times are epoch ms; an interval is in ms.
type scheduledJob struct {
	ID        string         `json:"id"`
	Name      string         `json:"name"`
	Type      string         `json:"type"`
	Cron      string         `json:"cron,omitempty"`
	Interval  int64          `json:"interval,omitempty"`
	ExecuteAt int64          `json:"executeAt,omitempty"`
	Timezone  string         `json:"timezone,omitempty"`
	Enabled   bool           `json:"enabled"`
	Metadata  map[string]any `json:"metadata"`
	LastRun   int64          `json:"lastRun,omitempty"`
	NextRun   int64          `json:"nextRun,omitempty"`
	RunCount  int64          `json:"runCount"`
	FailCount int64          `json:"failCount"`
}

type schedulerBody struct {
	Jobs  []scheduledJob `json:"jobs"`
	Stats schedulerStats `json:"stats"`
}

type schedulerStats struct {
	Total   int   `json:"total"`
	Active  int   `json:"active"`
	LastRun int64 `json:"lastRun,omitempty"`
}

func isoToMS(s string) int64 {
	t, err := time.Parse(event.TimeFormat, s)
	if err != nil {
		return 0
	}
	return t.UnixMilli()
}

// schedulerJobs lists the schedule triggers and the pending time awaits,
// `GET /api/_scheduler/jobs`.
func (a *API) schedulerJobs(w http.ResponseWriter, r *http.Request) error {
	g, err := a.registry()
	if err != nil {
		return err
	}
	ts, err := g.List(r.Context())
	if err != nil {
		return err
	}
	body := schedulerBody{Jobs: []scheduledJob{}}
	fired, flowSchedules, err := a.scheduleStates(r)
	if err != nil {
		return err
	}
	for _, t := range ts {
		if t.Type != triggers.TypeSchedule || t.Schedule == nil {
			continue
		}
		j := scheduledJob{ID: "trigger:" + t.Name, Name: t.DisplayName, Type: "cron", Cron: t.Schedule.Cron, Timezone: t.Schedule.Timezone,
			Enabled: t.Schedule.Enabled, LastRun: isoToMS(t.Stats.LastFiredAt), RunCount: t.Stats.TotalFires, FailCount: t.Stats.FailureCount,
			Metadata: map[string]any{"triggerName": t.Name, "subscribedFlows": t.SubscribedFlows}}
		if t.Schedule.Cron == "" {
			j.Type, j.Interval = "interval", int64(t.Schedule.Interval*1000)
		}
		if sc := fired[t.Name]; sc != nil {
			j.NextRun, j.LastRun, j.RunCount, j.FailCount = sc.NextRun, sc.LastRun, int64(sc.RunCount), int64(sc.FailCount)
		}
		body.Jobs = append(body.Jobs, j)
	}
	body.Jobs = append(body.Jobs, flowSchedules...)
	waits, err := a.engine.Waits(r.Context(), engine.WaitQuery{Kind: "time"})
	if err != nil {
		return err
	}
	for _, wt := range waits {
		at := isoToMS(wt.ResumeAt)
		body.Jobs = append(body.Jobs, scheduledJob{ID: wt.AwaitID, Name: wt.FlowName + " / " + wt.Step, Type: "one-time",
			ExecuteAt: at, NextRun: at, Enabled: true,
			Metadata: map[string]any{"flowName": wt.FlowName, "runId": wt.RunID, "stepName": wt.Step, "awaitType": "time"}})
	}
	for _, j := range body.Jobs {
		body.Stats.Total++
		if j.Enabled {
			body.Stats.Active++
		}
		body.Stats.LastRun = max(body.Stats.LastRun, j.LastRun)
	}
	slices.SortStableFunc(body.Jobs, func(x, y scheduledJob) int { return strings.Compare(x.Type, y.Type) })
	writeJSON(w, r, http.StatusOK, body)
	return nil
}

// scheduleStates reads the scheduler's schedules for the scheduler page:
// the schedule triggers' by name, and the v0.4 flow schedules as jobs of
// their own. Without a scheduler there are none.
func (a *API) scheduleStates(r *http.Request) (map[string]*scheduler.Schedule, []scheduledJob, error) {
	if a.scheduler == nil {
		return nil, nil, nil
	}
	scs, err := a.scheduler.List(r.Context(), scheduler.TriggerStream)
	if err != nil {
		return nil, nil, err
	}
	byName := make(map[string]*scheduler.Schedule, len(scs))
	for _, sc := range scs {
		byName[sc.Name()] = sc
	}
	if scs, err = a.scheduler.List(r.Context(), scheduler.FlowStream); err != nil {
		return nil, nil, err
	}
	jobs := make([]scheduledJob, 0, len(scs))
	for _, sc := range scs {
		if sc.Once && sc.RunCount > 0 {
			continue
		}
		flows := make([]string, len(sc.Targets))
		for i, t := range sc.Targets {
			flows[i] = t.FlowName
		}
		tz := sc.Spec.Timezone
		if tz == "" {
			tz = schedule.DefaultTimezone
		}
		jobs = append(jobs, scheduledJob{ID: sc.Stream.String(), Name: sc.Name(), Type: "cron", Cron: sc.Spec.Cron, Timezone: tz,
			Enabled: !sc.State.Paused, NextRun: sc.NextRun, LastRun: sc.LastRun, RunCount: int64(sc.RunCount), FailCount: int64(sc.FailCount),
			Metadata: map[string]any{"flowNames": flows, "scheduleId": sc.Name()}})
		if sc.Once {
			j := &jobs[len(jobs)-1]
			j.Type, j.Cron, j.Timezone, j.ExecuteAt = "one-time", "", "", sc.NextRun
		}
	}
	return byName, jobs, nil
}
