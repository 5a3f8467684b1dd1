// Package metrics exports nqd's Prometheus series (listed in docs/operations.md): one
// registry per process, built by wiring and never global, fed by decorators
// (a store wrapper, an HTTP middleware), by observers of the SSE streams and
// of the flow engine, and by the stores' count of the events they store.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nqd-dev/nqd/snapshots"
)

// namespace starts every series name.
const namespace = "nqd"

// Buckets of latency histograms: from 100 µs, where a store append on
// loopback lands, to 10 s, beyond every timeout.
var latencyBuckets = prometheus.ExponentialBucketsRange(0.0001, 10, 16)

// Metrics holds nqd's registry and its series. Build it with New.
type Metrics struct {
	reg *prometheus.Registry

	appendDuration *prometheus.HistogramVec // stage: store, total
	appends        *prometheus.CounterVec   // result: ok, replayed, error
	appendedEvents prometheus.Counter

	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec

	sseConns     *prometheus.GaugeVec   // by context type
	sseOpened    *prometheus.CounterVec // by context type
	sseClosed    *prometheus.CounterVec // by reason
	resumes      *prometheus.CounterVec // by result
	replayed     prometheus.Histogram
	backfill     prometheus.Histogram
	eventsSent   prometheus.Counter
	bytesSent    prometheus.Counter
	deliveryLag  prometheus.Histogram
	pubsubLag    prometheus.Histogram
	broadcast    prometheus.Histogram
	repaired     prometheus.Counter
	resubscribes prometheus.Counter

	webhookRefusals *prometheus.CounterVec // by webhook (trigger, await) and reason

	engine   engineSeries
	channels channelSeries
}

// New builds the registry with the Go runtime and process collectors and
// every nqd series.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m := &Metrics{reg: reg}
	f := factory{reg}

	m.appendDuration = f.histogramVec("append_duration_seconds",
		"Time to append a batch: stage=store is the store's atomic append and publish (the Redis leg), stage=total the whole HTTP request.",
		latencyBuckets, "stage")
	m.appends = f.counterVec("appends_total",
		"Appends by result: ok, replayed (an idempotency key seen before; nothing written) or error.", "result")
	m.appendedEvents = f.counter("appended_events_total",
		"Events stored, by every writer: API appends, the flow engine and workers' reports (replays store none).")

	m.httpRequests = f.counterVec("http_requests_total", "HTTP requests by route pattern, method and status.", "route", "method", "code")
	m.httpDuration = f.histogramVec("http_request_duration_seconds",
		"Time to answer an HTTP request, by route pattern; streams count until they end.", latencyBuckets, "route")

	m.sseConns = f.gaugeVec("sse_connections", "Open SSE streams by context type.", "type")
	m.sseOpened = f.counterVec("sse_connections_opened_total", "SSE streams opened, by context type.", "type")
	m.sseClosed = f.counterVec("sse_connections_closed_total",
		"SSE streams ended, by reason: client, slow (queue overflow or write deadline), rotate, shutdown or error.", "reason")
	m.resumes = f.counterVec("resume_total",
		"How SSE streams began: fresh (no position), exact (resumed after the client's event), reset (no longer retained) or unknown_id.", "result")
	m.replayed = f.histogram("sse_backfill_events", "Events sent by one stream's backfill or replay before it went live.",
		prometheus.ExponentialBuckets(1, 4, 9))
	m.backfill = f.histogram("sse_backfill_duration_seconds", "Time to write one stream's backfill or replay.", latencyBuckets)
	m.eventsSent = f.counter("events_sent_total", "Live events written to SSE clients.")
	m.bytesSent = f.counter("events_sent_bytes_total", "Bytes of live events written to SSE clients.")
	m.deliveryLag = f.histogram("delivery_lag_seconds",
		"Time from an event's append (its id's time) to its flush to a client, sampled once per flush.", latencyBuckets)
	m.pubsubLag = f.histogram("pubsub_lag_seconds",
		"Time from an event's append (its id's time) to its arrival on this instance's live feed.", latencyBuckets)
	m.broadcast = f.histogram("broadcast_duration_seconds", "Time to offer one event to every queue of its context.", latencyBuckets)
	m.repaired = f.counter("live_repaired_events_total", "Events the live feed missed, read from the stream instead.")
	m.resubscribes = f.counter("live_resubscribes_total", "Live feeds of a context that ended and were replaced.")
	m.webhookRefusals = f.counterVec("webhook_refusals_total",
		"Webhook calls refused for want of a credential, by webhook (trigger or await) and reason (missing_secret, bad_secret, no_secret).",
		"webhook", "reason")
	m.engine = newEngineSeries(f)
	m.channels = newChannelSeries(f)
	return m
}

// WebhookRefused counts a webhook call refused for want of a credential.
func (m *Metrics) WebhookRefused(webhook, reason string) {
	m.webhookRefusals.WithLabelValues(webhook, reason).Inc()
}

// EventsAppended counts events the store stored; set it as the store's
// Appended option, which every write of events passes.
func (m *Metrics) EventsAppended(n int) { m.appendedEvents.Add(float64(n)) }

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Register adds collectors of other packages (the flow engine's queues, a
// Redis pool) to the registry.
func (m *Metrics) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// WatchLive exports nqd_live_feed_up: 1 while ready reports no error, as the
// live feed's readiness check does.
func (m *Metrics) WatchLive(ready func() error) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "live_feed_up",
		Help: "1 while every context in use has a working live feed, else 0.",
	}, func() float64 {
		if ready() != nil {
			return 0
		}
		return 1
	}))
}

// WatchCache exports the snapshot cache's statistics, read at each scrape.
func (m *Metrics) WatchCache(stats func() snapshots.Stats) {
	f := factory{m.reg}
	counter := func(name, help string, v func(snapshots.Stats) float64) {
		f.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help},
			func() float64 { return v(stats()) }))
	}
	gauge := func(name, help string, v func(snapshots.Stats) float64) {
		f.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help},
			func() float64 { return v(stats()) }))
	}
	counter("cache_hits_total", "State reads answered from a cached state.", func(s snapshots.Stats) float64 { return float64(s.Hits) })
	counter("cache_misses_total", "State reads that rebuilt a state.", func(s snapshots.Stats) float64 { return float64(s.Misses) })
	counter("cache_evictions_total", "Cached states dropped to stay within the bounds.", func(s snapshots.Stats) float64 { return float64(s.Evictions) })
	counter("cache_expirations_total", "Cached states dropped when their TTL passed.", func(s snapshots.Stats) float64 { return float64(s.Expirations) })
	gauge("cache_entries", "Contexts whose state is cached.", func(s snapshots.Stats) float64 { return float64(s.Entries) })
	gauge("cache_bytes", "Estimated size of the cached states.", func(s snapshots.Stats) float64 { return float64(s.Bytes) })
	counter("cache_tail_events_total", "Events folded onto cached states.", func(s snapshots.Stats) float64 { return float64(s.TailEvents) })
	counter("cache_rebuild_events_total", "Events folded by rebuilds.", func(s snapshots.Stats) float64 { return float64(s.RebuildEvents) })
	counter("cache_fold_seconds_total", "Time spent folding events into states.", func(s snapshots.Stats) float64 { return s.FoldTime.Seconds() })
	counter("cache_checkpoints_written_total", "Checkpoints stored.", func(s snapshots.Stats) float64 { return float64(s.CheckpointsWritten) })
	counter("cache_checkpoints_skipped_total", "Checkpoints dropped because their queue was full.", func(s snapshots.Stats) float64 { return float64(s.CheckpointsSkipped) })
	counter("cache_checkpoints_failed_total", "Checkpoint writes the store refused.", func(s snapshots.Stats) float64 { return float64(s.CheckpointsFailed) })
}

// factory registers series under the nqd namespace.
type factory struct{ reg *prometheus.Registry }

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, labels)
	f.reg.MustRegister(g)
	return g
}

func (f factory) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets})
	f.reg.MustRegister(h)
	return h
}

func (f factory) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(h)
	return h
}

// since is the time from an event's append, by its id's time, to now; a
// clock behind the store's gives zero, not a negative lag.
func since(appended time.Time, now time.Time) float64 {
	return max(now.Sub(appended).Seconds(), 0)
}
