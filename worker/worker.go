// Package worker is the Go SDK for nqd's worker protocol: it claims jobs
// from queues over HTTP, runs the handler of each job's step with a step
// context (emit, run state, logs, attempt), keeps the job's lease alive with
// heartbeats, and completes or fails the job with the handler's outcome.
package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Handler runs one step. Its result is reported with step.completed; an
// error fails the attempt (retried per the step's policy unless it is a
// Permanent error).
type Handler func(ctx context.Context, sc *StepContext) (result any, err error)

// Config says where the worker connects and what it takes.
type Config struct {
	// BaseURL is nqd's address, e.g. http://127.0.0.1:8080.
	BaseURL string
	Queues  []string
	// Concurrency is how many jobs run at once; default 4.
	Concurrency int
	// Heartbeat is how often a running job's lease is extended; default 5s
	// (nqd's default lease is 30s).
	Heartbeat time.Duration
	// Client is the HTTP client; default one with no overall timeout, as
	// claims long-poll.
	Client *http.Client
	Logger zerolog.Logger
}

// Job is a claimed job as nqd hands it out.
type Job struct {
	ID       string          `json:"id"`
	Queue    string          `json:"queue"`
	Flow     string          `json:"flowName"`
	Run      string          `json:"runId"`
	Step     string          `json:"step"`
	Input    json.RawMessage `json:"input"`
	Attempt  int             `json:"attempt"`
	Lease    string          `json:"lease"`
	LeaseEnd int64           `json:"leaseUntil"`
}

// PermanentError marks a failure that must not be retried.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so the step fails without retry.
func Permanent(err error) error { return &PermanentError{Err: err} }

// ErrCanceled is the cause of a step context canceled because nqd said the
// run was canceled or the job withdrawn.
var ErrCanceled = errors.New("worker: run canceled")

// Run claims and runs jobs until ctx ends. handlers are keyed by step name;
// a job of a step without a handler fails permanently.
func Run(ctx context.Context, cfg Config, handlers map[string]Handler) error {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 5 * time.Second
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	c := &client{base: strings.TrimRight(cfg.BaseURL, "/"), http: cfg.Client}
	sem := make(chan struct{}, cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		var claimed struct{ Jobs []Job }
		free := cfg.Concurrency - len(sem)
		err := c.post(ctx, "/api/_workers/claim", map[string]any{"queues": cfg.Queues, "max": max(free, 1), "waitMs": 10000}, &claimed)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			cfg.Logger.Warn().Err(err).Msg("claim failed")
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for _, j := range claimed.Jobs {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				runJob(ctx, c, cfg, handlers[j.Step], j)
			})
		}
	}
	return nil
}

func runJob(ctx context.Context, c *client, cfg Config, h Handler, j Job) {
	log := cfg.Logger.With().Str("run", j.Run).Str("step", j.Step).Int("attempt", j.Attempt).Logger()
	jobCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sc := &StepContext{Job: j, c: c, ctx: jobCtx}
	base := "/api/_workers/jobs/" + url.PathEscape(j.Queue) + "/" + url.PathEscape(j.ID)

	done := make(chan struct{})
	go func() {
		t := time.NewTicker(cfg.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				var beat struct{ Canceled bool }
				err := c.post(jobCtx, base+"/heartbeat", map[string]string{"lease": j.Lease}, &beat)
				if beat.Canceled || isConflict(err) {
					cancel(ErrCanceled)
					return
				}
			}
		}
	}()
	defer close(done)

	if err := sc.report(map[string]any{"kind": "step.started"}); err != nil {
		log.Warn().Err(err).Msg("step.started not reported")
	}
	var result any
	var err error
	if h == nil {
		err = Permanent(fmt.Errorf("no handler for step %q", j.Step))
	} else {
		result, err = safeRun(jobCtx, h, sc)
	}
	if context.Cause(jobCtx) == ErrCanceled {
		log.Info().Msg("run canceled; job dropped")
		return
	}
	if err != nil {
		var perm *PermanentError
		retriable := !errors.As(err, &perm)
		if ferr := c.post(ctx, base+"/fail", map[string]any{"lease": j.Lease, "error": err.Error(), "retriable": retriable}, nil); ferr != nil {
			log.Error().Err(ferr).Msg("fail not reported")
		}
		return
	}
	body := map[string]any{"lease": j.Lease}
	if result != nil {
		body["result"] = result
	}
	if cerr := c.post(ctx, base+"/complete", body, nil); cerr != nil {
		log.Error().Err(cerr).Msg("complete not reported")
	}
}

func safeRun(ctx context.Context, h Handler, sc *StepContext) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return h(ctx, sc)
}

// StepContext is what a handler gets besides its context.
type StepContext struct {
	Job Job
	c   *client
	ctx context.Context
}

// Input decodes the job's input into v: the run input for the entry step,
// otherwise each subscribed event's payload keyed by event name.
func (sc *StepContext) Input(v any) error { return json.Unmarshal(sc.Job.Input, v) }

// Attempt is this try's number, 1 for the first.
func (sc *StepContext) Attempt() int { return sc.Job.Attempt }

func (sc *StepContext) report(evs ...map[string]any) error {
	base := "/api/_workers/jobs/" + url.PathEscape(sc.Job.Queue) + "/" + url.PathEscape(sc.Job.ID)
	return sc.c.post(sc.ctx, base+"/events", map[string]any{"lease": sc.Job.Lease, "events": evs}, nil)
}

// Emit emits event with payload; steps subscribed to it run once all their
// subscriptions were emitted.
func (sc *StepContext) Emit(event string, payload any) error {
	return sc.report(map[string]any{"kind": "emit", "data": map[string]any{"event": event, "payload": payload}})
}

// Log appends a log event at level (debug, info, warn, error).
func (sc *StepContext) Log(level, msg string) error {
	return sc.report(map[string]any{"kind": "log", "data": map[string]any{"level": level, "msg": msg}})
}

// State gives the run's key-value state (seed 000).
func (sc *StepContext) State() *State { return &State{sc: sc} }

// State reads and writes the run's state through state.* events.
type State struct{ sc *StepContext }

// Set sets key to value.
func (s *State) Set(key string, value any) error {
	return s.sc.report(map[string]any{"kind": "state.set", "data": map[string]any{"key": key, "value": value}})
}

// Delete removes key.
func (s *State) Delete(key string) error {
	return s.sc.report(map[string]any{"kind": "state.delete", "data": map[string]any{"key": key}})
}

// SetBatch sets every key of values in one event.
func (s *State) SetBatch(values map[string]any) error {
	ops := make([]map[string]any, 0, len(values))
	for k, v := range values {
		ops = append(ops, map[string]any{"type": "set", "key": k, "value": v})
	}
	return s.sc.report(map[string]any{"kind": "state.batch", "data": map[string]any{"operations": ops}})
}

// All returns the run's whole state as nqd's flow reducer folds it.
func (s *State) All() (map[string]json.RawMessage, error) {
	var ans struct {
		State struct {
			State map[string]json.RawMessage `json:"state"`
		} `json:"state"`
	}
	if err := s.sc.c.get(s.sc.ctx, "/api/_events/flow/"+url.PathEscape(s.sc.Job.Run)+"/state", &ans); err != nil {
		return nil, err
	}
	if ans.State.State == nil {
		return map[string]json.RawMessage{}, nil
	}
	return ans.State.State, nil
}

// Get decodes key's value into v and reports whether it is set.
func (s *State) Get(key string, v any) (bool, error) {
	all, err := s.All()
	if err != nil {
		return false, err
	}
	raw, ok := all[key]
	if !ok {
		return false, nil
	}
	return true, json.Unmarshal(raw, v)
}

// Resume is how the await a step declared resolved (seed 001 §6.5): the
// engine queues an awaiting step once its await resolves and hands the
// resolution in the input's `_resume`.
type Resume struct {
	AwaitType string          `json:"awaitType"`
	TriggerID string          `json:"triggerId,omitempty"`
	Payload   json.RawMessage `json:"payload,omitempty"` // a trigger's POST body
	Event     json.RawMessage `json:"event,omitempty"`   // the event an event await matched
	ResumeAt  string          `json:"resumeAt,omitempty"`
	// TimedOut is set in the input of an await's onTimeout step.
	TimedOut bool   `json:"timedOut,omitempty"`
	Step     string `json:"step,omitempty"` // the step whose await timed out
}

// Resume returns the resolution of the step's await, and false when the
// step declared none.
func (sc *StepContext) Resume() (Resume, bool) {
	var in struct {
		Resume *Resume `json:"_resume"`
	}
	if json.Unmarshal(sc.Job.Input, &in) != nil || in.Resume == nil {
		return Resume{}, false
	}
	return *in.Resume, true
}

type client struct {
	base string
	http *http.Client
}

// statusError is a non-2xx answer.
type statusError struct {
	Status int
	Body   string
}

func (e *statusError) Error() string { return fmt.Sprintf("nqd answered %d: %s", e.Status, e.Body) }

func isConflict(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.Status == http.StatusConflict
}

func (c *client) post(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.do(req, out)
}

func (c *client) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	return c.do(req, out)
}

func (c *client) do(req *http.Request, out any) error {
	res, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return err
	}
	if res.StatusCode/100 != 2 {
		return &statusError{Status: res.StatusCode, Body: string(b)}
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}
