package wiring

import (
	"context"
	"sync"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/triggers"
)

// StartTriggers builds the trigger registry kept in st and fires its event
// triggers in the background until stop is called. Every instance runs
// one; a fire is named by the event it matched, so each is handled once.
func StartTriggers(ctx context.Context, st engine.Store, states triggers.States, eng *engine.Engine, log zerolog.Logger) (reg *triggers.Registry, stop func()) {
	log = log.With().Str("component", "triggers").Logger()
	reg = triggers.New(st, states, eng, triggers.Options{Logger: log})
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { _ = reg.Run(ctx) })
	return reg, func() { cancel(); wg.Wait() }
}
