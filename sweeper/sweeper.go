// Package sweeper finds flow runs that the engine's own timers and workers
// will not move on. Every interval, on one instance at a time, it asks the
// engine to classify each run the index lists as running or awaiting: a run
// waiting on an await that is not due, or still moving, is left alone; an
// overdue await is timed out, a stuck run is flagged with flow.stalled and
// re-dispatched, an orphaned run's record is repaired from its stream. Each
// action is an event in the run's stream, written by the engine in the same
// atomic update as the change.
package sweeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/internal/outage"
	"github.com/nqd-dev/nqd/store"
)

// LeaseKey is the KV record that says which instance sweeps.
const LeaseKey = store.ReservedKVPrefix + "sweeper.lease"

// Engine is what the sweeper needs of the flow engine.
type Engine interface {
	Definitions(ctx context.Context) ([]*flows.Definition, error)
	Runs(ctx context.Context, flow, status string, offset, limit int) (store.RunPage, error)
	SweepRun(ctx context.Context, flow, runID string, stallAfter time.Duration) (string, error)
}

// Options tune a Sweeper. The zero value is usable.
type Options struct {
	// Interval is the time between sweeps; default DefaultInterval.
	Interval time.Duration
	// StallAfter is how long a run may go without an event, with no
	// pending await and no leased job, before it counts as stuck;
	// default DefaultStallAfter.
	StallAfter time.Duration
	// Lease is how long a sweeping instance keeps the sweep to itself
	// without renewing; default three intervals, so one slow sweep does
	// not hand the next to another instance.
	Lease time.Duration
	// Holder names this instance in the lease; default a random name.
	Holder string
	// Now is the clock; default time.Now. Tests pass the engine's.
	Now    func() time.Time
	Logger zerolog.Logger
}

// Defaults of Options.
const (
	DefaultInterval   = 30 * time.Second
	DefaultStallAfter = 5 * time.Minute
)

// Sweeper sweeps the runs of one engine. It is safe for concurrent use.
type Sweeper struct {
	eng  Engine
	kv   Leases
	opts Options

	mu      sync.Mutex
	classes map[string]uint64
	sweeps  uint64
	errs    uint64
}

// Leases is the part of store.KV the sweeper's lease lives in.
type Leases interface {
	Get(ctx context.Context, key string) (store.Record, error)
	SetFields(ctx context.Context, key string, fields map[string]string) (int64, error)
	CompareAndSwap(ctx context.Context, key string, cond store.Condition, set map[string]string) (int64, error)
}

// New returns a sweeper over eng whose lease lives in kv, so that of many
// instances one sweeps at a time.
func New(eng Engine, kv Leases, opts Options) *Sweeper {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.StallAfter <= 0 {
		opts.StallAfter = DefaultStallAfter
	}
	if opts.Lease <= 0 {
		opts.Lease = 3 * opts.Interval
	}
	if opts.Holder == "" {
		opts.Holder = randomHolder()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Sweeper{eng: eng, kv: kv, opts: opts, classes: map[string]uint64{}}
}

// Report is what one sweep did: how many runs it found in each class (the
// engine.Sweep* constants). Led is false when another instance holds the
// lease and this one did not sweep.
type Report struct {
	Led     bool
	Classes map[string]int
}

// Sweep classifies and acts on every running or awaiting run once, if this
// instance holds, or takes, the lease. A run that fails is logged and
// counted; the sweep goes on with the others and returns the first error.
func (s *Sweeper) Sweep(ctx context.Context) (Report, error) {
	rep := Report{Classes: map[string]int{}}
	led, err := s.lead(ctx)
	if err != nil || !led {
		return rep, err
	}
	rep.Led = true
	runs, err := s.candidates(ctx)
	if err != nil {
		s.count(nil, 1)
		return rep, err
	}
	var first error
	failed := 0
	for _, r := range runs {
		class, err := s.eng.SweepRun(ctx, r.Flow, r.Run, s.opts.StallAfter)
		if err != nil {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			s.opts.Logger.Error().Err(err).Str("flow", r.Flow).Str("run", r.Run).Msg("run not swept")
			first = cmpErr(first, err)
			failed++
			continue
		}
		rep.Classes[class]++
		if class != engine.SweepMoving && class != engine.SweepWaiting && class != engine.SweepGone {
			s.opts.Logger.Info().Str("flow", r.Flow).Str("run", r.Run).Str("class", class).Msg("run swept")
		}
	}
	s.count(rep.Classes, failed)
	return rep, first
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

type runRef struct{ Flow, Run string }

// candidates lists every running or awaiting run before any is acted on,
// since acting moves runs between the pages of the status index.
func (s *Sweeper) candidates(ctx context.Context) ([]runRef, error) {
	defs, err := s.eng.Definitions(ctx)
	if err != nil {
		return nil, err
	}
	const page = 200
	var out []runRef
	for _, d := range defs {
		flow := d.Name
		for _, status := range []string{store.RunRunning, store.RunAwaiting} {
			for off := 0; ; off += page {
				p, err := s.eng.Runs(ctx, flow, status, off, page)
				if err != nil {
					return nil, err
				}
				for _, m := range p.Runs {
					out = append(out, runRef{Flow: flow, Run: m.RunID})
				}
				if len(p.Runs) < page {
					break
				}
			}
		}
	}
	return out, nil
}

// lead reports whether this instance may sweep now: it holds the lease or
// takes it from a holder whose lease ran out. Of instances racing for it, a
// compare-and-swap on the record's version lets exactly one win.
func (s *Sweeper) lead(ctx context.Context) (bool, error) {
	rec, err := s.kv.Get(ctx, LeaseKey)
	if errors.Is(err, store.ErrNotFound) {
		// SetFields creates the record without touching a holder another
		// instance wrote meanwhile; the swap below then decides.
		if _, err := s.kv.SetFields(ctx, LeaseKey, map[string]string{"kind": "sweeper"}); err != nil {
			return false, err
		}
		rec, err = s.kv.Get(ctx, LeaseKey)
	}
	if err != nil {
		return false, err
	}
	now := s.opts.Now().UnixMilli()
	holder := rec.Fields["holder"]
	until, _ := strconv.ParseInt(rec.Fields["until"], 10, 64)
	if holder != s.opts.Holder && holder != "" && until > now {
		return false, nil
	}
	_, err = s.kv.CompareAndSwap(ctx, LeaseKey, store.Condition{Version: rec.Version}, map[string]string{
		"holder": s.opts.Holder, "until": strconv.FormatInt(now+s.opts.Lease.Milliseconds(), 10),
	})
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Release gives the lease up, if this instance holds it, so another
// instance can sweep without waiting for it to run out.
func (s *Sweeper) Release(ctx context.Context) error {
	_, err := s.kv.CompareAndSwap(ctx, LeaseKey, store.Condition{Field: "holder", Value: s.opts.Holder}, map[string]string{"until": "0"})
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// Run sweeps every Interval until ctx ends, then releases the lease. Errors
// are logged, not returned: the next sweep tries again.
func (s *Sweeper) Run(ctx context.Context) {
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	failing := outage.New(s.opts.Logger, "sweep")
	for {
		if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			failing.Failed(err)
		} else if err == nil {
			failing.Succeeded()
		}
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := s.Release(rctx); err != nil {
				s.opts.Logger.Warn().Err(err).Msg("sweeper lease not released")
			}
			return
		case <-t.C:
		}
	}
}

// Stats are the sweeper's counters since it was built.
type Stats struct {
	// Sweeps counts the sweeps this instance led.
	Sweeps uint64
	// Runs counts the runs swept, by class.
	Runs map[string]uint64
	// Errors counts the runs (and listings) a sweep failed on.
	Errors uint64
}

// Stats returns a copy of the counters.
func (s *Sweeper) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Stats{Sweeps: s.sweeps, Errors: s.errs, Runs: map[string]uint64{}}
	for k, v := range s.classes {
		out.Runs[k] = v
	}
	return out
}

func (s *Sweeper) count(classes map[string]int, failed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweeps++
	s.errs += uint64(failed)
	for k, v := range classes {
		s.classes[k] += uint64(v)
	}
}

var (
	sweepsDesc = prometheus.NewDesc("nqd_sweeper_sweeps_total", "Sweeps this instance led.", nil, nil)
	runsDesc   = prometheus.NewDesc("nqd_sweeper_runs_total", "Runs swept, by class (moving, waiting, overdue, stuck, flagged, orphaned, gone).", []string{"class"}, nil)
	errsDesc   = prometheus.NewDesc("nqd_sweeper_errors_total", "Runs or listings a sweep failed on.", nil, nil)
)

// Collector exports Stats as Prometheus counters, for metrics.Register.
func (s *Sweeper) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Sweeper }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sweepsDesc
	ch <- runsDesc
	ch <- errsDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	ch <- prometheus.MustNewConstMetric(sweepsDesc, prometheus.CounterValue, float64(st.Sweeps))
	ch <- prometheus.MustNewConstMetric(errsDesc, prometheus.CounterValue, float64(st.Errors))
	for class, n := range st.Runs {
		ch <- prometheus.MustNewConstMetric(runsDesc, prometheus.CounterValue, float64(n), class)
	}
}

func randomHolder() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var _ Engine = (*engine.Engine)(nil)
