// Package handlers is nqd's HTTP API: the route table, request decoding and
// the one error funnel every handler answers through. openapi.yaml at the
// repository root describes every route, and a test keeps the two equal.
package handlers

import (
	"context"
	"io/fs"
	"net/http"
	"net/url"
	"time"

	"github.com/go-playground/validator/v10"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/hlog"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/reducers"
	"github.com/nqd-dev/nqd/registry"
	"github.com/nqd-dev/nqd/scheduler"
	"github.com/nqd-dev/nqd/socket"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/triggers"
)

// Appender appends events to a context's stream; see store.Store.Append.
type Appender interface {
	Append(ctx context.Context, c store.Context, evs []event.Event, opts store.AppendOptions) (store.AppendResult, error)
}

// Reader reads a context's stream; see store.Store.Range and store.Store.Info.
type Reader interface {
	Range(ctx context.Context, c store.Context, q store.RangeQuery) ([]event.Event, error)
	Info(ctx context.Context, c store.Context) (store.StreamInfo, error)
}

// Indexer lists the members of an index; see store.Store.IndexList.
type Indexer interface {
	IndexList(ctx context.Context, ix store.Index, offset, limit int) (store.IndexPage, error)
}

// Pinger reports whether the store is reachable; see store.Store.Ping.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Store is the part of store.Store the API uses. Any store.Store is one.
type Store interface {
	Appender
	Reader
	Indexer
	Pinger
}

// StateReader answers a context's reduced state as of a position (see
// snapshots.Cache). The context route answers with it as `state`; the state
// routes and time travel (`at=`) need it.
type StateReader interface {
	// StateAt returns the fold of c's events with ids up to and including
	// at; event.MaxID means all of them. Errors follow the store's sentinels.
	StateAt(ctx context.Context, c store.Context, at event.ID) (reducers.State, error)
}

// Limits bound what one request may ask of the server. Zero fields take the
// Default values.
type Limits struct {
	MaxBodyBytes   int64         // request body size
	MaxBatch       int           // events in one append
	MaxEventBytes  int64         // one event as sent, in an append
	LargeDataBytes int64         // a run's input, a result or an emit payload over it goes to Deps.Data by reference (data.go); default MaxEventBytes
	ClaimBytes     int64         // a claim's answer stops taking jobs once their resolved inputs reach it (data.go)
	RequestTimeout time.Duration // time an API route may take
}

// The default limits. The body limit, 1 MiB, is the one openapi.yaml states
// for an append.
const (
	DefaultMaxBodyBytes  = 1 << 20
	DefaultMaxBatch      = 1000
	DefaultMaxEventBytes = 256 << 10
	// DefaultClaimBytes is half the answer the SDKs read (16 MiB), so
	// that an answer of several jobs stays readable; a job over it goes
	// alone.
	DefaultClaimBytes     = 8 << 20
	DefaultRequestTimeout = 10 * time.Second
	// DefaultIdleTimeout is how long the server keeps a keep-alive
	// connection that waits for its next request.
	DefaultIdleTimeout = 2 * time.Minute
)

// Deps are what the API is built from.
type Deps struct {
	Store Store
	// State answers the states of contexts: the context route's `state`,
	// the state routes and time travel (`at=`).
	State StateReader
	// Stream serves the Server-Sent Events routes.
	Stream Streamer
	// Feeds follows contexts for the WebSocket routes (the stream handler
	// does); without it those routes answer 404.
	Feeds Follower
	// Sockets tunes the WebSocket routes; their trusted origins are
	// CORSOrigins and their log is Log.
	Sockets socket.Options
	// TriggerList is the trigger registry, whose triggers' stats
	// /api/_triggers/ws sends; without it there are none.
	TriggerList TriggerLister
	// WatchInterval is how often the flow stats and queue counts the
	// sockets show are read while a socket listens; DefaultStatsInterval.
	WatchInterval time.Duration
	// Engine runs flows: the flow, trigger, worker and queue routes call it.
	Engine *engine.Engine
	// Workers is the worker registry: HTTP workers' claims register them and
	// GET /api/_workers lists what its stream holds. Without it claims
	// register no one.
	Workers *registry.Registry
	// JobLease is the engine's lease (NQ_JOB_LEASE), which a worker
	// channel's welcome states; default engine.DefaultLease.
	JobLease time.Duration
	// Channels, when set, counts what the worker channels do.
	Channels ChannelObserver
	// Scheduler serves the schedule routes; without it they answer 404.
	Scheduler *scheduler.Scheduler
	// Triggers is the trigger registry the /api/_triggers, webhook and
	// scheduler routes serve; without it they answer 404.
	Triggers *triggers.Registry
	// WebhookRefusals, when set, counts webhook calls refused for want of a
	// credential.
	WebhookRefusals WebhookRefusals
	// OpenWebhooks lets webhook calls without a credential fire webhook
	// triggers that have no secret and resolve await webhooks: what the
	// original did, and what an operator must ask for (NQ_ALLOW_OPEN_WEBHOOKS).
	OpenWebhooks bool
	// KeyPrefix is the storage key prefix that raw stream reads name
	// streams by (`<prefix>:<type>:<id>`); default store.DefaultPrefix.
	KeyPrefix string
	// KV serves the /api/_kv routes.
	KV KV
	// Archive is optional: without it `source=archive` answers 404.
	Archive ArchiveReader
	// Data is optional: with it large step data travels by reference
	// (data.go); without it data over MaxEventBytes is refused with 413.
	Data DataStore
	// Restorer takes archived runs back into the store; the restore route
	// answers 404 without an Archive to take them from.
	Restorer Restorer
	// Compactor is optional: without it the compact route answers 404.
	Compactor Compactor
	// History is optional: when set the read routes take events from it
	// rather than Store, so that events compaction trimmed still answer.
	History History
	// Ready are further readiness checks beyond the store's Ping, such as
	// the live feed; /readyz fails while any of them does.
	Ready []func(context.Context) error
	// CORSOrigins may call the API from a browser on another origin; empty
	// allows none (the UI is same-origin). "*" allows every origin.
	CORSOrigins []string
	// CheckHost refuses a request whose Host header is not an IP address,
	// localhost or one of AllowedHosts: what a loopback nqd needs against DNS
	// rebinding.
	CheckHost    bool
	AllowedHosts []string
	// Metrics serves GET /metrics (Prometheus).
	Metrics http.Handler
	Log     zerolog.Logger
	Now     func() time.Time // the API's clock, default time.Now; events take the store's
	Limits  Limits
	// Access is who may call what and how much; the zero value is open.
	Access Access
	// Web is optional: the browser dashboard's files (web.FS), served at
	// WebBase with index.html for every other path below it except /api/.
	Web fs.FS
	// WebBase is the dashboard's path, "" or "/" for the root.
	WebBase string
	// UIUpstream, when set, is a Nuxt app every request that is not nqd's
	// is forwarded to, WebSocket upgrades included (NQ_UI_UPSTREAM): the
	// v0.5 UI and nqd's API then share one origin. The dashboard is served
	// only at a WebBase of its own.
	UIUpstream *url.URL
}

// API serves nqd's HTTP routes. Build it with New and mount Routes.
type API struct {
	store   Store
	state   StateReader
	stream  Streamer
	feeds   Follower
	sockets *socket.Server
	// workerSockets are the worker channels (workerchannel.go).
	workerSockets *socket.Server
	jobLease      time.Duration
	channels      ChannelObserver
	// flowStats and queueCounts feed the sockets' live stats and counts.
	flowStats    *watch[flowMeta]
	queueCounts  *watch[queueView]
	triggerStats *watch[string]
	triggerList  TriggerLister
	engine       *engine.Engine
	workers      *registry.Registry
	scheduler    *scheduler.Scheduler
	triggers     *triggers.Registry
	refusals     WebhookRefusals
	// openWebhooks: see Deps.OpenWebhooks.
	openWebhooks bool
	keyPrefix    string
	kv           KV
	archive      ArchiveReader
	data         DataStore
	restorer     Restorer
	compact      Compactor
	history      History
	metrics      http.Handler
	ready        []func(context.Context) error
	cors         []string
	guard        guard
	inFlight     *inFlight
	// closing ends when the server shuts down; long polls end with it.
	closing   context.Context
	stopPolls context.CancelFunc
	log       zerolog.Logger
	now       func() time.Time
	limits    Limits
	access    access
	validate  *validator.Validate
	web       fs.FS
	webBase   string
	upstream  *url.URL
}

// New builds the API from d, filling in defaults for zero limits and clock.
func New(d Deps) *API {
	lim := d.Limits
	if lim.MaxBodyBytes <= 0 {
		lim.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if lim.MaxBatch <= 0 {
		lim.MaxBatch = DefaultMaxBatch
	}
	if lim.RequestTimeout <= 0 {
		lim.RequestTimeout = DefaultRequestTimeout
	}
	if lim.MaxEventBytes <= 0 {
		lim.MaxEventBytes = DefaultMaxEventBytes
	}
	if lim.LargeDataBytes <= 0 {
		lim.LargeDataBytes = lim.MaxEventBytes
	}
	if lim.ClaimBytes <= 0 {
		lim.ClaimBytes = DefaultClaimBytes
	}
	now := d.Now
	if now == nil {
		now = time.Now
	}
	keyPrefix := d.KeyPrefix
	if keyPrefix == "" {
		keyPrefix = store.DefaultPrefix
	}
	g, err := newGuard(d.CheckHost, d.AllowedHosts, d.CORSOrigins)
	if err != nil {
		// The config checks origins with the same rule; should one slip
		// through, trust no origin rather than every one.
		d.Log.Error().Err(err).Msg("NQ_CORS_ORIGINS: an origin is not valid; no origin is trusted")
		g, _ = newGuard(d.CheckHost, d.AllowedHosts, nil)
	}
	closing, stopPolls := context.WithCancel(context.Background())
	so := d.Sockets
	so.Origins, so.Log = d.CORSOrigins, d.Log
	interval := d.WatchInterval
	if interval <= 0 {
		interval = DefaultStatsInterval
	}
	a := &API{guard: g, inFlight: &inFlight{}, closing: closing, stopPolls: stopPolls,
		store: d.Store, state: d.State, stream: d.Stream, engine: d.Engine, scheduler: d.Scheduler, kv: d.KV, archive: d.Archive, restorer: d.Restorer, compact: d.Compactor, history: d.History, metrics: d.Metrics, ready: d.Ready, cors: d.CORSOrigins,
		log: d.Log, now: now, limits: lim, access: newAccess(d.Access, now), validate: newValidator(),
		web: d.Web, webBase: d.WebBase, keyPrefix: keyPrefix, upstream: d.UIUpstream,
		feeds: d.Feeds, sockets: socket.New(so), triggerList: d.TriggerList,
		triggers: d.Triggers, workers: d.Workers, refusals: d.WebhookRefusals, openWebhooks: d.OpenWebhooks,
	}
	a.data = d.Data
	a.workerSockets = socket.New(workerSocketOptions(so, lim))
	a.jobLease, a.channels = d.JobLease, d.Channels
	if a.jobLease <= 0 {
		a.jobLease = engine.DefaultLease
	}
	if a.channels == nil {
		a.channels = nopChannelObserver{}
	}
	a.flowStats = newWatch("flow stats", a.readFlowStats, interval, d.Log)
	a.queueCounts = newWatch("queue counts", a.readQueueCounts, interval, d.Log)
	a.triggerStats = newWatch("trigger stats", a.readTriggerStats, interval, d.Log)
	return a
}

// StopLongPolls ends the worker claims waiting for jobs, at once and for
// good: on shutdown a worker is told to come back later (503 with
// Retry-After) rather than held until the shutdown timeout.
func (a *API) StopLongPolls() { a.stopPolls() }

// isProbe reports whether r is a health probe.
func isProbe(r *http.Request) bool { return r.URL.Path == "/healthz" || r.URL.Path == "/readyz" }

// accessLog writes one line per request. It never logs headers or bodies,
// which may carry credentials or user data. Health probes are logged at
// debug: an orchestrator probes every few seconds, and those lines would
// drown the others.
func accessLog(r *http.Request, status, size int, d time.Duration) {
	log := hlog.FromRequest(r)
	line := log.Info()
	if isProbe(r) {
		line = log.Debug()
	}
	line.Str("method", r.Method).
		Str("path", r.URL.Path).
		Int("status", status).
		Int("size", size).
		Stringer("duration", d.Round(time.Microsecond)).
		Msg("request")
}
