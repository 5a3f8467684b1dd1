package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nqd-dev/nqd/store"
)

// queueCollector reads queue depths at scrape time, so the series are as
// fresh as the scrape and cost nothing between scrapes.
type queueCollector struct {
	queues func(context.Context) ([]string, error)
	stats  store.QueueStats
	now    func() time.Time
	jobs   *prometheus.Desc
	due    *prometheus.Desc
	leased *prometheus.Desc
	errs   prometheus.Counter
}

// WatchQueues exports nqd_queue_jobs (jobs not yet acknowledged: waiting,
// delayed or leased), nqd_queue_due (jobs a worker can claim now) and
// nqd_queue_leased (jobs held under a live lease) for
// every queue that queues names, read from stats at each scrape.
func (m *Metrics) WatchQueues(stats store.QueueStats, queues func(context.Context) ([]string, error)) error {
	return m.reg.Register(&queueCollector{
		queues: queues, stats: stats, now: time.Now,
		jobs:   prometheus.NewDesc("nqd_queue_jobs", "Jobs of a queue not yet acknowledged: waiting, delayed or leased.", []string{"queue"}, nil),
		due:    prometheus.NewDesc("nqd_queue_due", "Jobs of a queue that a worker can claim now.", []string{"queue"}, nil),
		leased: prometheus.NewDesc("nqd_queue_leased", "Jobs of a queue held by workers under leases that have not run out.", []string{"queue"}, nil),
		errs:   prometheus.NewCounter(prometheus.CounterOpts{Name: "nqd_queue_stats_errors_total", Help: "Scrapes that could not read a queue's depth."}),
	})
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.jobs
	ch <- c.due
	ch <- c.leased
	c.errs.Describe(ch)
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	// A scrape must answer even when the store does not.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	names, err := c.queues(ctx)
	if err != nil {
		c.errs.Inc()
	}
	now := c.now().UnixMilli()
	for _, q := range names {
		d, err := c.stats.QueueDepth(ctx, q, now)
		if err != nil {
			c.errs.Inc()
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(d.Jobs), q)
		ch <- prometheus.MustNewConstMetric(c.due, prometheus.GaugeValue, float64(d.Due), q)
		ch <- prometheus.MustNewConstMetric(c.leased, prometheus.GaugeValue, float64(d.Leased), q)
	}
	c.errs.Collect(ch)
}
