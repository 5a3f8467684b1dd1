package wiring

import (
	"context"
	"sync"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/config"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/metrics"
	"github.com/nqd-dev/nqd/sweeper"
)

// StartSweeper runs the sweeper over e every cfg.SweepInterval, under a lease
// in kv (so of many instances one sweeps), and exports its counters on m when
// m is set. stop ends the sweeper, waits for its sweep to return and releases
// the lease.
func StartSweeper(ctx context.Context, e *engine.Engine, kv sweeper.Leases, cfg config.Config, m *metrics.Metrics, log zerolog.Logger) (stop func(), err error) {
	log = log.With().Str("component", "sweeper").Logger()
	sw := sweeper.New(e, kv, sweeper.Options{Interval: cfg.SweepInterval, StallAfter: cfg.StallAfter, Logger: log})
	if m != nil {
		if err := m.Register(sw.Collector()); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { sw.Run(ctx) })
	return func() { cancel(); wg.Wait() }, nil
}
