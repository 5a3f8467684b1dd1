// Package worker is the Go SDK for nqd's worker protocol
// (docs/worker-protocol.md): it claims jobs from queues over HTTP, never
// more than it has free slots, runs the handler of each job's step with a
// step context (input, emits, run state, logs, progress, attempt), keeps
// every held job's lease alive with heartbeats, and completes or fails the
// job with the handler's outcome. Every report is retried with exponential
// backoff and jitter until the job's lease ends, so a restart of nqd loses
// nothing.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Handler runs one step. Its result is reported with step.completed; an
// error fails the attempt, retried per the step's policy unless it is a
// Permanent error. A handler should return soon after ctx is done.
type Handler func(ctx context.Context, sc *StepContext) (result any, err error)

// Config says where the worker connects and what it takes.
type Config struct {
	// BaseURL is nqd's address, e.g. http://127.0.0.1:8080.
	BaseURL string
	// Token, when set, is sent as `Authorization: Bearer <Token>`; nqd
	// needs one of the write scope when it has tokens configured.
	Token  string
	Queues []string
	// Concurrency is how many jobs run at once; default 4. The worker
	// never holds more jobs than this.
	Concurrency int
	// Heartbeat is how often every held job's lease is extended; default
	// 5s (nqd's default lease is 30s).
	Heartbeat time.Duration
	// Grace is how long running jobs may go on once ctx is done; those
	// still running then are failed as retriable. Default 10s.
	Grace time.Duration
	// Client is the HTTP client; default one with no overall timeout, as
	// claims long-poll, that keeps a connection per concurrent call open.
	Client *http.Client
	// Logger gets the worker's own logs; default slog.Default().
	Logger *slog.Logger
}

// Defaults the zero Config fields take.
const (
	DefaultConcurrency = 4
	DefaultHeartbeat   = 5 * time.Second
	DefaultGrace       = 10 * time.Second
)

// claimWait is how long a claim long-polls for work.
const claimWait = 10 * time.Second

func (cfg Config) withDefaults() (Config, error) {
	if u, err := url.Parse(cfg.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return cfg, fmt.Errorf("worker: Config.BaseURL: want nqd's address such as http://127.0.0.1:8080, got %q", cfg.BaseURL)
	}
	if len(cfg.Queues) == 0 {
		return cfg, errors.New("worker: Config.Queues is required")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Client == nil {
		// Every held job has calls in flight (heartbeats, reports), and the
		// claim one more: keep that many connections open rather than the
		// default two, which would make a busy worker dial for most calls.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 2*cfg.Concurrency + 1
		cfg.Client = &http.Client{Transport: t}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg, nil
}

// PermanentError marks a failure that must not be retried.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so the step fails without retry.
func Permanent(err error) error { return &PermanentError{Err: err} }

// Causes of a step context's cancellation (context.Cause).
var (
	// ErrCanceled: nqd said the run was cancelled or ended, or the job
	// was withdrawn. Nothing more is reported for the job.
	ErrCanceled = errors.New("worker: run canceled")
	// ErrLeaseLost: the job's lease ran out and another worker holds the
	// job now. Nothing more is reported for the job.
	ErrLeaseLost = errors.New("worker: lease lost")
	// ErrStopped: the worker was stopped and the grace period is over; the
	// job is failed as retriable.
	ErrStopped = errors.New("worker: stopped before the step finished")
)

// Run claims and runs jobs until ctx ends, then stops claiming, gives the
// running jobs cfg.Grace to finish, fails those still running as retriable
// and returns nil. handlers are keyed by step name; a job of a step without
// a handler fails permanently. Run returns an error at once for a bad
// Config, and after stopping the same way when nqd refuses the worker's
// claims for good (a 401 or 403 for its token, a 400 for its queues).
func Run(ctx context.Context, cfg Config, handlers map[string]Handler) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	w := &worker{
		cfg:      cfg,
		handlers: handlers,
		c:        &client{base: strings.TrimRight(cfg.BaseURL, "/"), http: cfg.Client, token: cfg.Token},
		log:      cfg.Logger,
	}
	// Jobs run under their own context, so that ctx ending only stops the
	// claims; stop cancels them once the grace period is over.
	jobs, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stop(nil)
	// Completions ask for the slot's next job only while claiming lasts,
	// however it ends: ctx done, or nqd refusing the claims for good.
	claiming, stopClaiming := context.WithCancel(ctx)
	defer stopClaiming()
	err = w.claimLoop(claiming, jobs)
	stopClaiming()
	if err != nil {
		w.log.Error("nqd refused the worker's claim; stopping", "err", err)
	}
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(cfg.Grace):
		w.log.Warn("grace period over: failing the running jobs as retriable", "grace", cfg.Grace)
		stop(ErrStopped)
		<-done
	}
	return err
}

type worker struct {
	cfg      Config
	handlers map[string]Handler
	c        *client
	log      *slog.Logger
	wg       sync.WaitGroup
	// oldServer is set once nqd refused a completion's claim as an
	// unknown field: completions claim no more.
	oldServer atomic.Bool
	// emitsApart is set once nqd refused emits in a completion (an nqd
	// from before completions took them): emits are sent at once from then
	// on.
	emitsApart atomic.Bool
}

// claimLoop claims jobs while ctx lasts, for as many slots as are free, and
// starts each under jobs. It returns an error when nqd refuses the claims
// in a way that retrying cannot mend.
func (w *worker) claimLoop(ctx, jobs context.Context) error {
	slots := make(chan struct{}, w.cfg.Concurrency)
	wait := newBackOff()
	for {
		// Take one slot, waiting for it, then every other free one.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		free := 1
	more:
		for free < w.cfg.Concurrency {
			select {
			case slots <- struct{}{}:
				free++
			default:
				break more
			}
		}
		claimed, err := w.c.claim(ctx, w.cfg.Queues, free)
		if len(claimed) > free {
			// nqd never answers more than asked for; a job beyond the
			// slots is left to its lease rather than run without one.
			w.log.Error("nqd answered more jobs than asked for", "asked", free, "got", len(claimed))
			claimed = claimed[:free]
		}
		for range free - len(claimed) {
			<-slots
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !retriable(err) {
				return fmt.Errorf("worker: claim: %w", err)
			}
			d := wait.NextBackOff()
			w.log.Warn("claim failed; trying again", "err", err, "in", d)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(d):
			}
			continue
		}
		wait.Reset()
		for _, j := range claimed {
			w.wg.Go(func() {
				defer func() { <-slots }()
				// A completion may bring the slot's next job with it.
				for next := &j; next != nil; {
					next = w.runJob(ctx, jobs, *next)
				}
			})
		}
	}
}

// newBackOff is the schedule of every retry: 100 ms doubling to 5 s, each
// wait randomised by ±50 %.
func newBackOff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.MaxInterval = 5 * time.Second
	b.RandomizationFactor = 0.5
	b.Multiplier = 2
	return b
}
