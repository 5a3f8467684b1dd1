package e2e_test

import (
	"sync"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/examples/demo"
	"github.com/nqd-dev/nqd/internal/backendtest"
)

// BenchmarkPipeline measures whole runs of the three-step pipeline flow:
// starts over HTTP, the demo worker (no pretend work) claiming, emitting and
// completing over HTTP through the worker SDK, until every run completed.
// It reports runs/s and steps/s; one op is one run.
func BenchmarkPipeline(b *testing.B) {
	for _, name := range backends {
		b.Run(name, func(b *testing.B) {
			base := startServer(b, backendtest.Named(b, name).Args(b))
			startWorker(b, base, 32, demo.Handlers(demo.Options{}))
			// One run first, so the worker's connections are warm.
			startRun(b, base, "pipeline", nil)
			waitFor(b, time.Minute, "the warm-up run", func() bool { return runs(b, base, "pipeline", "completed", 0, 1).Total == 1 })

			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			next := make(chan struct{})
			for range 16 {
				wg.Go(func() {
					for range next {
						startRun(b, base, "pipeline", nil)
					}
				})
			}
			for range b.N {
				next <- struct{}{}
			}
			close(next)
			wg.Wait()
			waitFor(b, 10*time.Minute, "every run to complete", func() bool {
				return runs(b, base, "pipeline", "completed", 0, 1).Total == int64(b.N)+1
			})
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "runs/s")
			b.ReportMetric(3*float64(b.N)/elapsed.Seconds(), "steps/s")
		})
	}
}
