// Package wiring is nqd's composition root: it turns a config.Config into a
// running server, choosing the store backend and assembling the HTTP handler.
// It is the only package that imports every other one.
package wiring

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/config"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/metrics"
	"github.com/nqd-dev/nqd/snapshots"
	"github.com/nqd-dev/nqd/socket"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/pgstore"
	"github.com/nqd-dev/nqd/store/redisstore"
	"github.com/nqd-dev/nqd/stream"
	"github.com/nqd-dev/nqd/web"
)

// App is an assembled nqd: its store, its handler and its listener.
type App struct {
	log     zerolog.Logger
	cfg     config.Config
	Store   store.Backend
	secrets secretKeeper // where the store keeps nqd's own keys
	Stream  *stream.Handler
	Metrics *metrics.Metrics
	Handler http.Handler
	api     *handlers.API
	ln      net.Listener
	srv     *http.Server
	closers []func() error // run in reverse order by Close
}

// New binds the listen address, opens the store the config selects and
// builds the handler, so that a bad address or an unreachable Redis fails
// here, synchronously. It listens first: an address in use must not cost a
// store opened for nothing.
func New(ctx context.Context, cfg config.Config, log zerolog.Logger) (*App, error) {
	a := &App{log: log, cfg: cfg}
	ln, err := listen(ctx, cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("NQ_ADDR: listen on %s: %w", cfg.Addr, err)
	}
	a.ln = ln
	a.closers = append(a.closers, func() error {
		// Serve's shutdown closes it first when the server ran.
		if err := ln.Close(); !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	})
	a.Metrics = metrics.New() // before the store, which counts the events it stores
	st, err := a.openStore(ctx)
	if err != nil {
		return nil, errors.Join(err, a.Close())
	}
	a.Store = st

	arch, err := OpenArchive(ctx, cfg)
	if err != nil {
		return nil, errors.Join(err, a.Close())
	}
	if arch != nil {
		a.closers = append(a.closers, arch.Close)
		a.Metrics.WatchArchive(arch.Stats)
		log.Info().Str("archive", arch.String()).Msg("archiving to a bucket")
	}
	history, compactor := Compaction(st, arch)
	states := snapshots.New(history, snapshots.Options{
		MaxEntries:      cfg.CacheEntries,
		MaxBytes:        cfg.CacheBytes,
		Checkpoints:     st,
		CheckpointEvery: cfg.CheckpointEvery,
		Logger:          log,
	})
	a.closers = append(a.closers, states.Close) // before the store it writes checkpoints to
	a.watch(states)

	a.Stream = stream.NewHandler(stream.Options{
		Store:       st,
		Prefix:      cfg.Prefix,
		Log:         log,
		Heartbeat:   cfg.SSEHeartbeat,
		MaxBackfill: cfg.SSEMaxBackfill,
		MaxLifetime: cfg.SSEMaxLifetime,
		TrustLive:   st.Features().LiveReliable,
		State:       states.StateJSON,
		Observer:    a.Metrics.Stream(),
	})
	a.closers = append(a.closers, func() error { a.Stream.Close(); return nil })
	ready := []func(context.Context) error{
		func(context.Context) error { return a.Stream.Ready() },
		st.LiveHealthy,
	}

	signer, err := TriggerSigner(ctx, cfg, a.secrets)
	if err != nil {
		return nil, errors.Join(err, a.Close())
	}
	eng, stop, err := StartEngine(ctx, st, cfg.FlowsDir, engine.Options{
		Logger: log, Triggers: signer, Lease: cfg.JobLease, Observer: a.Metrics.Engine(),
	})
	if err != nil {
		return nil, errors.Join(err, a.Close())
	}
	a.closers = append(a.closers, func() error { stop(); return nil })
	registry, stopTriggers := StartTriggers(ctx, st, states, eng, log)
	a.closers = append(a.closers, func() error { stopTriggers(); return nil })
	stopSweeper, err := StartSweeper(ctx, eng, st, cfg, a.Metrics, log)
	if err != nil {
		return nil, errors.Join(err, a.Close())
	}
	a.closers = append(a.closers, func() error { stopSweeper(); return nil })
	workers, stopWorkers := StartWorkers(ctx, cfg, st, log)
	a.closers = append(a.closers, func() error { stopWorkers(); return nil })
	if err := a.Metrics.WatchQueues(st, engineQueues(eng), queueWorkers(states, workers)); err != nil {
		return nil, errors.Join(err, a.Close())
	}
	if err := a.Metrics.WatchAwaits(eng.PendingAwaits); err != nil {
		return nil, errors.Join(err, a.Close())
	}
	stopReaper := StartRetention(ctx, st, cfg, arch, log)
	a.closers = append(a.closers, func() error { stopReaper(); return nil })
	sch, stopScheduler, err := StartScheduler(ctx, eng, st, registry, a.Metrics, log)
	if err != nil {
		return nil, errors.Join(err, a.Close())
	}
	a.closers = append(a.closers, func() error { stopScheduler(); return nil })

	access, err := a.access(ctx)
	if err != nil {
		return nil, errors.Join(err, a.Close())
	}
	deps := handlers.Deps{
		Store:           a.Metrics.Store(st),
		State:           states,
		Engine:          eng,
		JobLease:        cfg.JobLease,
		Channels:        a.Metrics.Channels(),
		Scheduler:       sch,
		Triggers:        registry,
		Workers:         workers,
		TriggerList:     registry,
		WebhookRefusals: a.Metrics,
		OpenWebhooks:    cfg.AllowOpenWebhooks,
		KeyPrefix:       cfg.Prefix,
		KV:              st,
		Restorer:        st,
		Web:             web.FS,
		WebBase:         cfg.WebBase,
		Stream:          a.Stream,
		Feeds:           a.Stream,
		Sockets:         socket.Options{Ping: cfg.SSEHeartbeat},
		Ready:           ready,
		CORSOrigins:     cfg.CORSOrigins,
		CheckHost:       cfg.CheckHost(),
		AllowedHosts:    cfg.ServedHosts(),
		Metrics:         a.Metrics.Handler(),
		Log:             log,
		Now:             time.Now,
		Limits: handlers.Limits{
			MaxBodyBytes:   cfg.MaxBodyBytes,
			MaxBatch:       cfg.MaxBatch,
			MaxEventBytes:  cfg.MaxEventBytes,
			LargeDataBytes: cfg.LargeDataBytes,
			RequestTimeout: cfg.RequestTimeout,
		},
		Access: access,
	}
	if cfg.UIUpstream != "" {
		// Checked by the config already.
		if deps.UIUpstream, err = url.Parse(cfg.UIUpstream); err != nil {
			return nil, errors.Join(fmt.Errorf("NQ_UI_UPSTREAM: %w", err), a.Close())
		}
		log.Info().Str("upstream", deps.UIUpstream.Redacted()).Msg("forwarding what is not nqd's API to the UI app")
	}
	if compactor != nil { // a nil pointer in an interface would not read as off
		deps.Compactor, deps.History = compactor, history
	}
	if arch != nil {
		deps.Archive, deps.Data = arch, arch
	}
	a.api = handlers.New(deps)
	a.Handler = a.Metrics.Middleware(a.api.Routes())

	a.srv = &http.Server{
		Handler:           a.Handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       cfg.IdleTimeout,
		ErrorLog:          nil,
	}
	return a, nil
}

// watch adds the series read at each scrape: the cache and the live feed.
// The store's counter of stored events, the store the API appends through,
// the SSE and engine observers and the HTTP middleware feed the others, set
// where those are built.
func (a *App) watch(states *snapshots.Cache) {
	a.Metrics.WatchCache(states.Stats)
	a.Metrics.WatchLive(func() error { return a.Stream.Ready() })
}

func (a *App) openStore(ctx context.Context) (store.Backend, error) {
	switch a.cfg.Backend() {
	case "redis":
		client, mode, err := redisClient(ctx, a.cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("NQ_REDIS_URL: %w", err)
		}
		a.closers = append(a.closers, client.Close)
		pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := client.Ping(pingCtx).Err(); err != nil {
			return nil, fmt.Errorf("redis at %s is not reachable: %w", redactURL(a.cfg.RedisURL), err)
		}
		st, err := redisstore.New(client, redisstore.Options{
			Prefix:            a.cfg.Prefix,
			IdempotencyWindow: a.cfg.IdempotencyWindow,
			MaxLen:            a.cfg.StreamMaxLen,
			MaxLenByType:      a.cfg.StreamMaxLenByType,
			WaitReplicas:      a.cfg.RedisWaitReplicas,
			WaitTimeout:       a.cfg.RedisWaitTimeout,
			Shards:            a.cfg.RedisShards,
			Logger:            a.log,
			Retention:         RetentionPolicy(a.cfg),
			Appended:          a.Metrics.EventsAppended,
		})
		if err != nil {
			return nil, err
		}
		a.closers = append(a.closers, st.Close)
		if err := st.CheckShards(pingCtx); err != nil {
			return nil, fmt.Errorf("NQ_REDIS_SHARDS=%d: %w", a.cfg.RedisShards, err)
		}
		a.secrets = st
		a.log.Info().Str("store", "redis").Str("redis", redactURL(a.cfg.RedisURL)).Str("mode", mode).Str("prefix", a.cfg.Prefix).Int("shards", a.cfg.RedisShards).Msg("using the Redis store")
		return st, nil
	case "postgres":
		if a.cfg.StreamMaxLen > 0 || len(a.cfg.StreamMaxLenByType) > 0 {
			a.log.Warn().Msg("NQ_STREAM_MAXLEN and NQ_STREAM_MAXLEN_BY_TYPE do not apply to the PostgreSQL store: its streams are trimmed by compaction only")
		}
		openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		st, err := pgstore.Open(openCtx, a.cfg.PostgresURL, pgstore.Options{
			IdempotencyWindow: a.cfg.IdempotencyWindow,
			Logger:            a.log,
			Retention:         RetentionPolicy(a.cfg),
			Appended:          a.Metrics.EventsAppended,
		})
		if err != nil {
			return nil, fmt.Errorf("postgres at %s: %w", redactURL(a.cfg.PostgresURL), err)
		}
		a.closers = append(a.closers, st.Close)
		a.secrets = st
		version, _ := st.SchemaVersion(openCtx)
		a.log.Info().Str("store", "postgres").Str("postgres", redactURL(a.cfg.PostgresURL)).Int("schema_version", version).Msg("using the PostgreSQL store")
		return st, nil
	default:
		if err := os.MkdirAll(a.cfg.DataDir, 0o750); err != nil {
			return nil, fmt.Errorf("NQ_DATA_DIR: %w", err)
		}
		path := filepath.Join(a.cfg.DataDir, "nqd.db")
		st, err := boltstore.Open(path, boltstore.Options{
			IdempotencyWindow: a.cfg.IdempotencyWindow,
			Logger:            a.log,
			Retention:         RetentionPolicy(a.cfg),
			Appended:          a.Metrics.EventsAppended,
		})
		if err != nil {
			return nil, fmt.Errorf("open the embedded store %s: %w", path, err)
		}
		a.closers = append(a.closers, st.Close)
		a.secrets = dirSecrets(a.cfg.DataDir)
		a.log.Info().Str("store", "embedded").Str("path", path).Msg("using the embedded store (set NQ_REDIS_URL to use Redis)")
		return st, nil
	}
}

// redactURL hides the password of a Redis URL so it never reaches a log.
func redactURL(raw string) string {
	if i := strings.Index(raw, "://"); i >= 0 {
		if at := strings.LastIndex(raw, "@"); at > i {
			return raw[:i+3] + "***@" + raw[at+1:]
		}
	}
	return raw
}

// Addr is the address the server listens on (useful with port 0).
func (a *App) Addr() string { return a.ln.Addr().String() }

// browseURL is the dashboard's address for a browser on this machine:
// loopback when nqd listens on every interface.
func browseURL(addr, base string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + strings.TrimSuffix(base, "/") + "/"
}

// Serve serves until Shutdown; it returns nil after a clean shutdown.
func (a *App) Serve() error {
	a.log.Info().Str("addr", a.Addr()).Str("open", browseURL(a.Addr(), a.cfg.WebBase)).Msg("nqd listening")
	if err := a.srv.Serve(a.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops accepting connections, tells the workers waiting for jobs
// to come back later, closes the open event streams spread over part of the
// time left (so that their clients do not all reconnect to the other
// instances at once) and waits for open requests until ctx ends.
func (a *App) Shutdown(ctx context.Context) error {
	if a.srv == nil {
		return nil
	}
	a.api.StopLongPolls()
	// Shutdown does not wait for hijacked or streaming responses to end on
	// their own; Drain ends the streams and DrainSockets the WebSockets
	// (1001 after a server-restart message), in parallel with it.
	drained, socketsClosed := make(chan error, 1), make(chan error, 1)
	go func() { drained <- a.Stream.Drain(ctx) }()
	go func() { socketsClosed <- a.api.DrainSockets(ctx) }()
	err := a.srv.Shutdown(ctx)
	return errors.Join(err, <-drained, <-socketsClosed)
}

// Close releases everything New opened, newest first.
func (a *App) Close() error {
	var errs []error
	for i := len(a.closers) - 1; i >= 0; i-- {
		errs = append(errs, a.closers[i]())
	}
	a.closers = nil
	return errors.Join(errs...)
}

// Run is New, then Serve until ctx is done, then a graceful shutdown.
func Run(ctx context.Context, cfg config.Config, log zerolog.Logger) error {
	a, err := New(ctx, cfg, log)
	if err != nil {
		return err
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- a.Serve() }()
	select {
	case err = <-serveErr:
	case <-ctx.Done():
		log.Info().Stringer("timeout", cfg.ShutdownTimeout).Msg("shutting down")
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		err = a.Shutdown(sctx)
		cancel()
		if serr := <-serveErr; err == nil {
			err = serr
		}
	}
	return errors.Join(err, a.Close())
}

// Logger builds the process logger: JSON, or human-readable console output
// when format is "console" or "auto" with out being a terminal.
func Logger(cfg config.Config, out *os.File) zerolog.Logger {
	level, err := zerolog.ParseLevel(cfg.LogLevel)
	if err != nil {
		level = zerolog.InfoLevel
	}
	var w io.Writer = out
	if cfg.LogFormat == "console" || (cfg.LogFormat == "auto" && isTerminal(out)) {
		w = zerolog.ConsoleWriter{Out: out, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
