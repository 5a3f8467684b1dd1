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
	queues   func(context.Context) ([]string, error)
	stats    store.QueueStats
	workers  func(context.Context) (map[string]int, error)
	now      func() time.Time
	jobs     *prometheus.Desc
	due      *prometheus.Desc
	leased   *prometheus.Desc
	served   *prometheus.Desc
	unserved *prometheus.Desc
	errs     prometheus.Counter
}

// WatchQueues exports nqd_queue_jobs (jobs not yet acknowledged: waiting,
// delayed or leased), nqd_queue_due (jobs a worker can claim now) and
// nqd_queue_leased (jobs held under a live lease) for every queue that
// queues names, read from stats at each scrape. With workers (the connected
// workers of each queue) it exports nqd_queue_workers and nqd_queue_unserved
// too: 1 while jobs are due and no worker serves the queue.
func (m *Metrics) WatchQueues(stats store.QueueStats, queues func(context.Context) ([]string, error), workers func(context.Context) (map[string]int, error)) error {
	return m.reg.Register(&queueCollector{
		queues: queues, stats: stats, workers: workers, now: time.Now,
		jobs:     prometheus.NewDesc("nqd_queue_jobs", "Jobs of a queue not yet acknowledged: waiting, delayed or leased.", []string{"queue"}, nil),
		due:      prometheus.NewDesc("nqd_queue_due", "Jobs of a queue that a worker can claim now.", []string{"queue"}, nil),
		leased:   prometheus.NewDesc("nqd_queue_leased", "Jobs of a queue held by workers under leases that have not run out.", []string{"queue"}, nil),
		served:   prometheus.NewDesc("nqd_queue_workers", "Connected workers that serve a queue, from the worker registry.", []string{"queue"}, nil),
		unserved: prometheus.NewDesc("nqd_queue_unserved", "1 while a queue has jobs due and no connected worker serves it, else 0.", []string{"queue"}, nil),
		errs:     prometheus.NewCounter(prometheus.CounterOpts{Name: "nqd_queue_stats_errors_total", Help: "Scrapes that could not read a queue's depth."}),
	})
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.jobs
	ch <- c.due
	ch <- c.leased
	if c.workers != nil {
		ch <- c.served
		ch <- c.unserved
	}
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
	var workers map[string]int
	if c.workers != nil {
		if workers, err = c.workers(ctx); err != nil {
			c.errs.Inc()
		}
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
		if workers != nil {
			unserved := 0.0
			if d.Due > 0 && workers[q] == 0 {
				unserved = 1
			}
			ch <- prometheus.MustNewConstMetric(c.served, prometheus.GaugeValue, float64(workers[q]), q)
			ch <- prometheus.MustNewConstMetric(c.unserved, prometheus.GaugeValue, unserved, q)
		}
	}
	c.errs.Collect(ch)
}
