package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nqd-dev/nqd/scheduler"
)

// Scheduler returns the scheduler's observer: fires by source, their
// lateness and skips by reason. It registers the series, so it is called
// once.
func (m *Metrics) Scheduler() (scheduler.Observer, error) {
	o := schedulerObserver{
		fires: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "schedule_fires_total",
			Help: "Due times of schedules fired, by source (schedule, immediate, now, backfill)."}, []string{"source"}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "schedule_lateness_seconds",
			Help:    "How long after its planned time a due time fired.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}}),
		skips: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "schedule_skips_total",
			Help: "Due times of schedules skipped, by reason (misfire, catch_up_window, catch_up_max, overlap)."}, []string{"reason"}),
	}
	return o, m.Register(o.fires, o.lateness, o.skips)
}

type schedulerObserver struct {
	fires    *prometheus.CounterVec
	lateness prometheus.Histogram
	skips    *prometheus.CounterVec
}

func (o schedulerObserver) Fired(source string, late time.Duration) {
	o.fires.WithLabelValues(source).Inc()
	if source == "schedule" {
		o.lateness.Observe(late.Seconds())
	}
}

func (o schedulerObserver) Skipped(reason string, n int) {
	o.skips.WithLabelValues(reason).Add(float64(n))
}
