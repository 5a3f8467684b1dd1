package handlers

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/go-chi/cors"
	"github.com/rs/zerolog/hlog"

	"github.com/nqd-dev/nqd/auth"
)

// Routes is the whole HTTP API in one table, grouped as openapi.yaml tags
// it. Each route names the scope it needs (read, write or admin); the
// health checks, CORS preflights, the trigger and webhook routes (whose
// credential is their own) and the streams and sockets (which check their
// tokens themselves) need none. Routes on api answer within the request
// timeout; the others live longer: a claim's long poll, streams, sockets, a
// metrics scrape.
func (a *API) Routes() http.Handler {
	r := chi.NewRouter()
	r.Use(
		a.access.requestScope(a.log),
		hlog.AccessHandler(accessLog),
		recoverer,
		a.readBodies,
		a.guard.checkHost,
	)
	if len(a.cors) > 0 {
		r.Use(cors.Handler(cors.Options{
			AllowedOrigins: a.cors,
			AllowedMethods: []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete},
			AllowedHeaders: []string{"Content-Type", "Idempotency-Key", "Last-Event-ID", "Authorization", "X-Request-ID"},
			ExposedHeaders: []string{"X-Request-ID", "Idempotent-Replayed", "Retry-After"},
			MaxAge:         600,
		}))
	}
	r.Use(a.guard.checkBrowser, a.access.Auth.Middleware)
	// Set before any sub-router exists so that every one inherits them.
	r.NotFound(notFound)
	r.MethodNotAllowed(methodNotAllowed(r))
	read, write, admin := a.require(auth.Read), a.require(auth.Write), a.require(auth.Admin)
	api := r.With(middleware.Timeout(a.limits.RequestTimeout))

	// health. HEAD too: probes such as curl -I and some load balancers use it.
	api.Get("/healthz", serve(a.healthz))
	api.Head("/healthz", serve(a.healthz))
	api.Get("/readyz", serve(a.readyz))
	api.Head("/readyz", serve(a.readyz))
	// A scrape of a large registry is bounded by the scraper's own timeout.
	if a.access.PublicMetrics {
		r.Method(http.MethodGet, "/metrics", a.metrics)
	} else {
		r.With(read).Method(http.MethodGet, "/metrics", a.metrics)
	}

	// auth
	api.With(read).Post("/api/_auth/stream-token", serve(a.issueStreamToken))

	// events and state
	api.Route("/api/_events/{type}", func(r chi.Router) {
		r.With(read).Get("/list", serve(a.listContexts))
		r.With(read).Get("/{id}", serve(a.getContext))
		r.With(write, a.limitRate).Post("/{id}", serve(a.appendEvents))
		r.With(read).Get("/{id}/state", serve(a.getState))
		r.With(read).Get("/{id}/state/diff", serve(a.getStateDiff))
		r.With(read).Get("/{id}/data/{sha256}", serve(a.getData))
		r.With(admin).Post("/{id}/restore", serve(a.restoreContext))
		r.With(admin).Post("/{id}/compact", serve(a.compactContext))
	})
	// One segment after _events: a stream named by its storage key, the
	// v0.3 UI's read. Registered after the route above, it takes GET there.
	api.With(read).Get("/api/_events/{key}", serve(a.readRawStream))
	// Server-Sent Events: a long-lived response must be neither cut by the
	// API timeout nor buffered by compression.
	r.Get("/api/_events/sse", a.serveStream)
	r.Get("/api/_events/{type}/{id}/stream", a.serveStream)

	// flows: the listing and the start the v0.3 UI calls, the runs page and
	// run actions of the v0.4/v0.5 UI (docs/compatibility.md), and the awaits
	// of runs. A trigger POST carries no API token: its signed, single-use
	// trigger id is its credential, so it takes no scope and is limited by
	// the caller's address.
	api.With(read).Get("/api/_flows", serve(a.listFlows))
	api.With(read).Get("/api/_flows/{name}", serve(a.getFlow))
	api.With(admin).Put("/api/_flows/{name}", serve(a.putFlow))
	api.With(admin).Delete("/api/_flows/{name}", serve(a.deleteFlow))
	api.With(read).Get("/api/_flows/{name}/diagram", serve(a.flowDiagram))
	api.With(write, a.limitRate).Post("/api/_flows/{name}/start", serve(a.startFlow))
	api.With(read).Get("/api/_flows/{name}/runs", serve(a.listRuns))
	api.With(admin).Post("/api/_flows/{name}/runs/{runId}/cancel", serve(a.cancelRun))
	api.With(admin).Post("/api/_flows/{name}/runs/{runId}/restart", serve(a.restartRun))
	api.With(admin).Delete("/api/_flows/{name}/clear-history", serve(a.clearHistory))
	api.With(a.limitRate).Post("/api/_flows/triggers/{id}", serve(a.fireTrigger))
	api.With(read).Get("/api/_flows/waits", serve(a.listWaits))

	// schedules: Nuxt Queue v0.4's flow schedules and nqd's own routes of a
	// schedule (docs/schedules.md)
	api.With(write).Post("/api/_flows/{name}/schedule", serve(a.createFlowSchedule))
	api.With(read).Get("/api/_flows/{name}/schedules", serve(a.listFlowSchedules))
	api.With(write).Delete("/api/_flows/{name}/schedules/{id}", serve(a.deleteFlowSchedule))
	api.With(read).Get("/api/_scheduler/schedules", serve(a.listSchedules))
	api.With(read).Get("/api/_scheduler/jobs/{id}/preview", serve(a.previewSchedule))
	api.With(write).Post("/api/_scheduler/jobs/{id}/fire", serve(a.fireSchedule))
	api.With(admin).Post("/api/_scheduler/jobs/{id}/backfill", serve(a.backfillSchedule))
	api.With(admin).Post("/api/_scheduler/jobs/{id}/pause", serve(a.pauseSchedule(true)))
	api.With(admin).Post("/api/_scheduler/jobs/{id}/resume", serve(a.pauseSchedule(false)))

	// workers (docs/worker-protocol.md). A claim long-polls for longer than
	// the API timeout, and a worker channel lives as long as its worker.
	const job = "/api/_workers/jobs/{queue}/{jobId}"
	r.With(write).Post("/api/_workers/claim", serve(a.claimJobs))
	r.With(write).Get("/api/_workers/channel", a.serveWorkerChannel)
	api.With(write, a.touchWorker).Post(job+"/heartbeat", serve(a.heartbeatJob))
	api.With(write, a.touchWorker).Post(job+"/events", serve(a.reportJob))
	api.With(write, a.touchWorker).Post(job+"/complete", serve(a.completeJob))
	api.With(write, a.touchWorker).Post(job+"/fail", serve(a.failJob))
	api.With(write).Post("/api/_workers/goodbye", serve(a.workerGoodbye))
	api.With(read).Get("/api/_workers", serve(a.listWorkers))

	// queues, as the v0.3 UI reads them
	api.With(read).Get("/api/_queues", serve(a.listQueues))
	api.With(read).Get("/api/_queues/metrics", serve(a.allQueueMetrics))
	api.With(read).Get("/api/_queues/{queue}", serve(a.getQueue))
	api.With(read).Get("/api/_queues/{queue}/metrics", serve(a.queueMetrics))
	api.With(admin).Post("/api/_queues/{queue}/pause", serve(a.pauseQueue(true)))
	api.With(admin).Post("/api/_queues/{queue}/resume", serve(a.pauseQueue(false)))
	api.With(read).Get("/api/_queues/{queue}/job", serve(a.listJobs))
	api.With(write, a.limitRate).Post("/api/_queues/{queue}/job", serve(a.addJob))
	api.With(read).Get("/api/_queues/{queue}/job/{jobId}", serve(a.getJob))
	api.With(read).Get("/api/_queues/{queue}/job/{jobId}/logs", serve(a.jobLogs))

	// kv: the KV state store for workers (store/kv.go): records of string
	// fields with a TTL, field writes, compare-and-swap
	api.With(read).Get("/api/_kv", serve(a.scanKV))
	api.With(read).Get("/api/_kv/{key}", serve(a.getKV))
	api.With(write).Put("/api/_kv/{key}", serve(a.putKV))
	api.With(write).Delete("/api/_kv/{key}", serve(a.deleteKV))
	api.With(read).Get("/api/_kv/{key}/fields/{field}", serve(a.getKVField))
	api.With(write).Post("/api/_kv/{key}/fields", serve(a.setKVFields))
	api.With(write).Post("/api/_kv/{key}/cas", serve(a.casKV))

	// triggers: the registry of the v0.5 UI and its scheduler page. The
	// registry's mutations answer their refusals in a 200 as
	// {error, statusCode}, where the UI looks for them.
	api.With(read).Get("/api/_triggers", serve(a.listTriggers))
	api.With(write).Post("/api/_triggers", serveInBody(a.createTrigger))
	api.With(read).Get("/api/_triggers/stats", serve(a.summarizeTriggers))
	api.With(read).Get("/api/_triggers/{name}", serve(a.getTrigger))
	api.With(write).Patch("/api/_triggers/{name}", serveInBody(a.patchTrigger))
	api.With(write).Delete("/api/_triggers/{name}", serveInBody(a.deleteTrigger))
	api.With(read).Get("/api/_triggers/{name}/events", serve(a.triggerEvents))
	api.With(write, a.limitRate).Post("/api/_triggers/{name}/fire", serve(a.fireRegistered))
	api.With(read).Get("/api/_scheduler/jobs", serve(a.schedulerJobs))

	// webhooks carry no scope: a secret, a signed trigger id or an API token
	// is their credential, checked by the route.
	for _, m := range webhookMethods {
		api.With(a.limitRate).Method(m, "/api/_webhook/trigger/{name}", serve(a.webhookTrigger))
		api.With(a.limitRate).Method(m, "/api/_webhook/await/{flow}/{runId}/{step}", serve(a.webhookAwait))
	}

	// sockets: the v0.5 UI's WebSockets (docs/websockets.md), which live as
	// long as their client. `/api/_flows/ws` is a literal and so is routed
	// before `/api/_flows/{name}`.
	r.Get("/api/_flows/ws", a.serveSocket(a.newFlowSession))
	r.Get("/api/_queues/ws", a.serveSocket(a.newQueueSession))
	r.Get("/api/_triggers/ws", a.serveSocket(a.newTriggerSession))

	// The dashboard is public files; the API calls it makes carry the auth.
	// Every path below its base gets index.html, so that the page's own
	// routes survive a reload; paths under /api/ never do: an unknown API
	// route answers the JSON 404 a client expects.
	if s := a.dashboard(); s != nil {
		if s.base != "" {
			r.Get(s.base, s.redirectToBase)
		}
		r.Get(s.base+"/assets/*", s.serveAsset)
		r.Get(s.base+"/*", s.serveIndex)
	}

	if a.upstream != nil {
		return a.passThrough(r, a.upstream)
	}
	return r
}
