package metrics

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/store"
)

// The flow engine's series. Their labels stay few: flow names are those of
// stored definitions (every run the engine decides on has one), queues
// those the definitions name, await types and timer kinds a fixed set.
type engineSeries struct {
	runsStarted   *prometheus.CounterVec   // flow
	runsEnded     *prometheus.CounterVec   // flow, status
	attempts      *prometheus.CounterVec   // flow
	retries       *prometheus.CounterVec   // flow
	awaits        *prometheus.CounterVec   // type, outcome
	leasesExpired *prometheus.CounterVec   // queue
	timersDue     *prometheus.CounterVec   // kind
	timerLateness *prometheus.HistogramVec // kind
}

func newEngineSeries(f factory) engineSeries {
	return engineSeries{
		runsStarted: f.counterVec("engine_runs_started_total", "Flow runs started, by flow.", "flow"),
		runsEnded: f.counterVec("engine_runs_ended_total",
			"Flow runs ended, by flow and status: completed, failed or cancelled.", "flow", "status"),
		attempts: f.counterVec("engine_step_attempts_total",
			"Step attempts handed to workers by claims, by flow: first tries, retries and redeliveries after an expired lease.", "flow"),
		retries: f.counterVec("engine_step_retries_total",
			"Failed steps scheduled again after their backoff (step.retry), by flow.", "flow"),
		awaits: f.counterVec("engine_awaits_total",
			"Awaits by type (time, event, trigger) and outcome: registered, resumed (the time came, the event arrived, the trigger fired) or timed_out.",
			"type", "outcome"),
		leasesExpired: f.counterVec("engine_leases_expired_total",
			"Jobs taken back from a worker whose lease ran out, by queue.", "queue"),
		timersDue: f.counterVec("engine_timers_due_total",
			"Durable timers taken when due, by kind: retry, await, timeout, event.", "kind"),
		timerLateness: f.histogramVec("engine_timer_lateness_seconds",
			"Time from a timer's due time to the engine taking it, by kind.", latencyBuckets, "kind"),
	}
}

// Engine is the observer to set as engine.Options.Observer.
func (m *Metrics) Engine() engine.Observer { return engineObserver{m.engine} }

type engineObserver struct{ s engineSeries }

var _ engine.Observer = engineObserver{}

func (o engineObserver) Committed(u store.RunUpdate) {
	flow := u.Meta.FlowName
	for _, ev := range u.Events {
		switch kind := ev.Kind; {
		case kind == "flow.started":
			o.s.runsStarted.WithLabelValues(flow).Inc()
		case kind == "flow.completed", kind == "flow.failed", kind == "flow.cancelled":
			o.s.runsEnded.WithLabelValues(flow, strings.TrimPrefix(kind, "flow.")).Inc()
		case kind == "step.retry":
			o.s.retries.WithLabelValues(flow).Inc()
		case kind == "step.await.timeout":
			o.s.awaits.WithLabelValues(awaitType(ev.Data), "timed_out").Inc()
		case strings.HasPrefix(kind, "step.await."):
			o.s.awaits.WithLabelValues(knownAwait(strings.TrimPrefix(kind, "step.await.")), "registered").Inc()
		case kind == "step.resumed":
			o.s.awaits.WithLabelValues(awaitType(ev.Meta), "resumed").Inc()
		}
	}
}

func (o engineObserver) Claimed(j store.Job) { o.s.attempts.WithLabelValues(j.FlowName).Inc() }

func (o engineObserver) LeaseExpired(j store.Job) { o.s.leasesExpired.WithLabelValues(j.Queue).Inc() }

func (o engineObserver) TimerDue(t store.Timer, late time.Duration) {
	kind := t.Kind
	switch kind {
	case "retry", "await", "timeout", "event":
	default:
		kind = "other"
	}
	o.s.timersDue.WithLabelValues(kind).Inc()
	o.s.timerLateness.WithLabelValues(kind).Observe(late.Seconds())
}

// awaitType reads the awaitType field the engine writes into the data or
// meta of step.resumed and step.await.timeout.
func awaitType(raw json.RawMessage) string {
	var v struct {
		AwaitType string `json:"awaitType"`
	}
	_ = json.Unmarshal(raw, &v)
	return knownAwait(v.AwaitType)
}

func knownAwait(t string) string {
	switch t {
	case "time", "event", "trigger":
		return t
	}
	return "other"
}

// WatchAwaits exports nqd_engine_awaits_pending by type, counted at each
// scrape from the records of the runs still going (pending reads them).
func (m *Metrics) WatchAwaits(pending func(context.Context) (map[string]int, error)) error {
	return m.reg.Register(&awaitsCollector{
		pending: pending,
		desc:    prometheus.NewDesc("nqd_engine_awaits_pending", "Awaits of runs still going that have not resolved, by type.", []string{"type"}, nil),
		errs:    prometheus.NewCounter(prometheus.CounterOpts{Name: "nqd_engine_awaits_pending_errors_total", Help: "Scrapes that could not count the pending awaits."}),
	})
}

type awaitsCollector struct {
	pending func(context.Context) (map[string]int, error)
	desc    *prometheus.Desc
	errs    prometheus.Counter
}

func (c *awaitsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desc
	c.errs.Describe(ch)
}

func (c *awaitsCollector) Collect(ch chan<- prometheus.Metric) {
	// A scrape must answer even when the store does not.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := c.pending(ctx)
	if err != nil {
		c.errs.Inc()
	} else {
		for _, t := range []string{"time", "event", "trigger"} {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n[t]), t)
		}
	}
	c.errs.Collect(ch)
}
