// Package worker is the Go SDK for nqd's worker protocol
// (docs/worker-protocol.md): it takes jobs from queues, over the worker
// channel (a WebSocket on which nqd offers jobs as slots free up) or, when
// nqd or a proxy cannot open one, by claiming them over HTTP, never more
// than it has free slots, runs the handler of each job's step with a
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
	// Grace is how long the worker takes to stop once ctx is done:
	// running jobs may go on for it, less the time kept to report those
	// still running then as retriable failures (a fifth of it, at most
	// 2 s). Default 10s.
	Grace time.Duration
	// Client is the HTTP client; default one that keeps a connection per
	// concurrent call open. Each call has a timeout of its own (callTimeout;
	// a claim its long-poll more), so the client needs none.
	Client *http.Client
	// Logger gets the worker's own logs; default slog.Default().
	Logger *slog.Logger
	// Transport is Channel (the default: the worker channel, falling
	// back to HTTP when nqd or a proxy cannot open it) or HTTP.
	Transport Transport
}

// Defaults the zero Config fields take.
const (
	DefaultConcurrency = 4
	DefaultGrace       = 10 * time.Second
)

// claimWait is how long a claim long-polls for work; callTimeout bounds
// every other call, and a claim's long-poll by as much again.
const (
	claimWait   = 10 * time.Second
	callTimeout = 10 * time.Second
)

// maxStopReport bounds the part of the grace period kept for reporting the
// jobs still running once it is over.
const maxStopReport = 2 * time.Second

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

// EncodeError is a value of the step that cannot be encoded as JSON: a
// state value, a log's metadata, an emit's payload, the result. Nothing of
// it is sent, the call that made it returns it at once and is never
// retried, and the step fails with its message (whether or not the handler
// returns it), retried only as the step's retry policy says.
type EncodeError struct {
	// Field names the value, e.g. `state value "k"` or `result`.
	Field string
	Err   error
}

func (e *EncodeError) Error() string { return e.Field + " cannot be encoded as JSON: " + e.Err.Error() }
func (e *EncodeError) Unwrap() error { return e.Err }

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
// running jobs the grace period to finish, fails those still running as
// retriable and returns nil, all within cfg.Grace. handlers are keyed by
// "flow/step", or by step name for a step of any flow (the flow's key
// wins); a job of a step without a handler fails permanently. Run returns
// an error at once for a bad Config, and after stopping the same way when
// nqd refuses the worker's claims for good (a 401 or 403 for its token, a
// 400 for its queues).
func Run(ctx context.Context, cfg Config, handlers map[string]Handler) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	w := &worker{
		cfg:      cfg,
		handlers: handlers,
		c:        &client{base: strings.TrimRight(cfg.BaseURL, "/"), http: cfg.Client, token: cfg.Token, self: selfHeaders(cfg)},
		log:      cfg.Logger,
		slots:    make(chan struct{}, cfg.Concurrency),
	}
	// Last, once every job is done: nqd's worker registry shows the worker
	// left rather than lost once silent.
	defer w.c.goodbye(context.WithoutCancel(ctx))
	w.closeChannel = func() {}
	// Jobs run under their own context, so that ctx ending only stops the
	// claims; stop cancels them once the grace period is over. Their
	// reports and heartbeats go on under reports, which the grace
	// period's end cancels.
	jobs, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stop(nil)
	reports, endReports := context.WithCancelCause(context.WithoutCancel(ctx))
	defer endReports(nil)
	// Completions ask for the slot's next job only while claiming lasts,
	// however it ends: ctx done, or nqd refusing the claims for good.
	claiming, stopClaiming := context.WithCancel(ctx)
	defer stopClaiming()
	w.claiming, w.jobs, w.reports = claiming, jobs, reports
	// The channel stays open for the reports of the running jobs.
	defer func() { w.closeChannel() }()
	err = w.take()
	stopClaiming()
	if err != nil {
		w.log.Error("nqd refused the worker; stopping", "err", err)
	}
	// No job starts from now on: Run waits for those running.
	w.slotMu.Lock()
	w.stopping = true
	w.slotMu.Unlock()
	over := time.Now().Add(cfg.Grace)
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
		return err
	case <-time.After(time.Until(over) - min(cfg.Grace/5, maxStopReport)):
	}
	w.log.Warn("grace period over: failing the running jobs as retriable", "grace", cfg.Grace)
	stop(ErrStopped)
	select {
	case <-done:
	case <-time.After(time.Until(over)):
		w.log.Warn("reports still on their way at the end of the grace period dropped")
		endReports(ErrStopped)
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
	// claiming lasts while the worker takes jobs; jobs and reports are
	// the contexts of the steps and of their reports (see Run).
	claiming, jobs, reports context.Context
	// closeChannel closes the worker channel and waits for it.
	closeChannel func()

	// slots holds a token per job the worker holds. slotMu orders taking
	// and letting go of slots with a channel's hello (channel.go); it
	// guards what follows: paused once the worker told nqd to offer
	// nothing more, stopping once Run waits for the running jobs, waiting
	// the offered jobs waiting for their slot.
	slots    chan struct{}
	slotMu   sync.Mutex
	paused   bool
	stopping bool
	waiting  int
}

// take takes jobs while claiming lasts: over the worker channel, or over
// HTTP when so configured or when nqd cannot open a channel. It returns an
// error when nqd refuses the worker in a way that retrying cannot mend.
func (w *worker) take() error {
	if w.cfg.Transport == HTTP {
		return w.claimLoop(w.claiming)
	}
	ctx, cancel := context.WithCancel(w.reports)
	connected, fallback, closed := make(chan error, 1), make(chan error, 1), make(chan struct{})
	go func() {
		defer close(closed)
		w.channels(ctx, connected, fallback)
	}()
	w.closeChannel = func() { cancel(); <-closed }
	var err error
	select {
	case err = <-connected:
	case <-w.claiming.Done():
		w.pause()
		return nil
	}
	if err == nil {
		select {
		case <-w.claiming.Done():
			w.pause()
			return nil
		case err = <-fallback:
		}
	}
	if errors.Is(err, errNoChannel) {
		w.log.Info("nqd offers no worker channel; taking jobs over HTTP", "why", err)
		return w.claimLoop(w.claiming)
	}
	if w.claiming.Err() != nil {
		return nil
	}
	return fmt.Errorf("worker: channel: %w", err)
}

// runSlot runs j in the slot it holds, then the jobs its completions
// claimed over HTTP in turn, and lets the slot go.
func (w *worker) runSlot(j Job) {
	var freedOn *chConn
	for next := &j; next != nil; {
		next, freedOn = w.runJob(w.claiming, w.jobs, w.reports, *next)
	}
	w.release(freedOn)
}

// claimLoop claims jobs over HTTP while ctx lasts, for as many slots as
// are free, and runs each in its slot. It returns an error when nqd
// refuses the claims in a way that retrying cannot mend.
func (w *worker) claimLoop(ctx context.Context) error {
	slots := w.slots
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
			// A completion may bring the slot's next job with it.
			w.wg.Go(func() { w.runSlot(j) })
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
