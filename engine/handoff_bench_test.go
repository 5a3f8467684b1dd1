package engine_test

import (
	"testing"
	"time"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
)

// BenchmarkRunOnWaitingClaim is one run at a time on the embedded store
// (fsync per commit), as a worker sees it: a claim long-polls, a run starts,
// the claim gets the job, the job completes. "handoff" hands the job to the
// claim in the start's commit; "claim" is the same store without that, so
// the claim takes it in a commit of its own. Compare the two ns/op.
func BenchmarkRunOnWaitingClaim(b *testing.B) {
	for _, mode := range []string{"claim", "handoff"} {
		b.Run(mode, func(b *testing.B) {
			ctx := b.Context()
			st := &countingStore{Store: bolttest.Open(b, boltstore.Options{})}
			if mode == "handoff" {
				st.features = leasing
			}
			e := engine.New(st, engine.Options{Lease: 10 * time.Second, Logger: testkit.Logger(b)})
			mustDefine(b, e, "one", "example-flow")
			d, err := e.Definition(ctx, "one")
			if err != nil {
				b.Fatal(err)
			}
			queue := d.Steps[d.Entry].Queue
			b.ResetTimer()
			for range b.N {
				got := make(chan []store.Job, 1)
				go func() {
					jobs, _ := e.Claim(ctx, []string{queue}, 1, 5*time.Second)
					got <- jobs
				}()
				if _, err := e.Start(ctx, "one", nil, ""); err != nil {
					b.Fatal(err)
				}
				jobs := <-got
				if len(jobs) != 1 {
					b.Fatalf("claimed %d jobs", len(jobs))
				}
				if err := e.Complete(ctx, store.JobAck{Queue: jobs[0].Queue, ID: jobs[0].ID, Lease: jobs[0].Lease}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
