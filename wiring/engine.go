package wiring

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/flows"
)

// StartEngine builds the flow engine on st with jobs leased for lease,
// stores the definitions found in flowsDir (none when it is empty) so every
// instance sees them, and starts the loop that fires due retries. stop ends
// the loop and waits for it.
func StartEngine(ctx context.Context, st engine.Store, flowsDir string, lease time.Duration, triggers *auth.TriggerSigner, log zerolog.Logger) (e *engine.Engine, stop func(), err error) {
	e = engine.New(st, engine.Options{Logger: log, Triggers: triggers, Lease: lease})
	if flowsDir != "" {
		defs, err := flows.LoadDir(flowsDir)
		if err != nil {
			return nil, nil, fmt.Errorf("NQ_FLOWS_DIR %s: %w", flowsDir, err)
		}
		for _, d := range defs {
			if err := e.PutDefinition(ctx, d); err != nil {
				return nil, nil, fmt.Errorf("store flow %s: %w", d.Name, err)
			}
			log.Info().Str("flow", d.Name).Msg("flow loaded")
		}
	}
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.Run(loopCtx) })
	return e, func() { cancel(); wg.Wait() }, nil
}

// engineQueues lists the queues the stored flow definitions name, for the
// queue-depth metrics.
func engineQueues(e *engine.Engine) func(context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		defs, err := e.Definitions(ctx)
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		var queues []string
		for _, d := range defs {
			for _, st := range d.Steps {
				if st.Queue != "" && !seen[st.Queue] {
					seen[st.Queue] = true
					queues = append(queues, st.Queue)
				}
			}
		}
		slices.Sort(queues)
		return queues, nil
	}
}
