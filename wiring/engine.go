package wiring

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/flows"
)

// StartEngine builds the flow engine on st with opts, stores the
// definitions found in flowsDir (none when it is empty) so every instance
// sees them, and starts the loop that fires due retries. stop ends the loop
// and waits for it.
func StartEngine(ctx context.Context, st engine.Store, flowsDir string, opts engine.Options) (e *engine.Engine, stop func(), err error) {
	log := opts.Logger
	e = engine.New(st, opts)
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
