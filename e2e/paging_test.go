package e2e_test

import (
	"testing"
	"time"

	"github.com/nqd-dev/nqd/examples/demo"
	"github.com/nqd-dev/nqd/internal/backendtest"
)

// TestRunningPagesWhileCompleting pages through runs?status=running with
// offset while a worker completes the runs. Each page is read in one step
// with its total, so it is full unless it is the last, ordered newest first,
// and holds each run once; a run listed may have completed since the index
// was read, never anything else.
func TestRunningPagesWhileCompleting(t *testing.T) {
	backendtest.Each(t, backends, func(t *testing.T, b backendtest.Backend) {
		args := b.Args(t)
		const n, limit = 60, 7
		base := startServer(t, args)
		started := map[string]bool{}
		for range n {
			started[startRun(t, base, "pipeline", nil)] = true
		}

		// pass pages through the running runs once and returns the ids seen
		// and the totals the pages reported.
		pass := func() (ids map[string]bool, totals []int64) {
			ids = map[string]bool{}
			for offset := 0; ; offset += limit {
				p := runs(t, base, "pipeline", "running", offset, limit)
				totals = append(totals, p.Total)
				if want := min(limit, max(0, int(p.Total)-offset)); p.Count != want || len(p.Items) != want {
					t.Errorf("page at %d of %d has %d items, want %d", offset, p.Total, len(p.Items), want)
				}
				for i, it := range p.Items {
					if ids[it.ID] {
						t.Errorf("run %s listed twice in one pass", it.ID)
					}
					ids[it.ID] = true
					if !started[it.ID] || (it.Status != "running" && it.Status != "completed") {
						t.Errorf("listed %+v", it)
					}
					if i > 0 && it.StartedAt > p.Items[i-1].StartedAt {
						t.Errorf("page at %d is not newest first: %s after %s", offset, it.StartedAt, p.Items[i-1].StartedAt)
					}
				}
				if offset+limit >= int(p.Total) {
					return ids, totals
				}
			}
		}

		if ids, _ := pass(); len(ids) != n {
			t.Fatalf("before any run completed a pass saw %d of %d runs", len(ids), n)
		}
		startWorker(t, base, 2, demo.Handlers(demo.Options{Work: 10 * time.Millisecond}))
		midway := false
		waitFor(t, 60*time.Second, "every run to complete", func() bool {
			_, totals := pass()
			for _, total := range totals {
				midway = midway || (total > 0 && total < n)
			}
			return totals[len(totals)-1] == 0
		})
		if !midway {
			t.Error("no page was read while runs were completing")
		}
		if p := runs(t, base, "pipeline", "completed", 0, 1); p.Total != n {
			t.Errorf("%d runs completed, want %d", p.Total, n)
		}
	})
}
