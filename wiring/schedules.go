package wiring

import (
	"context"
	"sync"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/metrics"
	"github.com/nqd-dev/nqd/scheduler"
	"github.com/nqd-dev/nqd/triggers"
)

// StartScheduler builds the scheduler on eng's timers and st, with the
// schedule triggers of reg, and keeps them in step until stop is called. Every instance runs one; the engine's
// timers let one instance fire each due time.
func StartScheduler(ctx context.Context, eng *engine.Engine, st engine.Store, reg *triggers.Registry, m *metrics.Metrics, log zerolog.Logger) (sch *scheduler.Scheduler, stop func(), err error) {
	log = log.With().Str("component", "scheduler").Logger()
	obs, err := m.Scheduler()
	if err != nil {
		return nil, nil, err
	}
	sch = scheduler.New(eng, st, scheduler.Options{Logger: log, Observer: obs, Registry: reg})
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { sch.Run(ctx) })
	return sch, func() { cancel(); wg.Wait() }, nil
}
