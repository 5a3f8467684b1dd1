package wiring

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/config"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/registry"
)

// StartWorkers builds the worker registry on st with cfg's intervals and
// sweeps it every heartbeat interval until stop is called. Every instance
// sweeps; the registry writes each departure once however many do.
func StartWorkers(ctx context.Context, cfg config.Config, st interface {
	registry.Store
	registry.KV
}, log zerolog.Logger) (reg *registry.Registry, stop func()) {
	log = log.With().Str("component", "workers").Logger()
	reg = registry.New(st, st, registry.Options{
		Interval: cfg.WorkerHeartbeat, LostAfter: cfg.WorkerLostAfter, Retain: cfg.WorkerRetain, Log: log,
	})
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { reg.Run(ctx) })
	return reg, func() { cancel(); wg.Wait() }
}

// queueWorkers counts each queue's connected workers from the registry's
// state in states.
func queueWorkers(states registry.StateReader, reg *registry.Registry) func(context.Context) (map[string]int, error) {
	return func(ctx context.Context) (map[string]int, error) {
		s, err := registry.State(ctx, states, event.MaxID)
		if err != nil {
			return nil, err
		}
		return s.QueueWorkers(time.Now().Add(-reg.StaleAfter())), nil
	}
}
