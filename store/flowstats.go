package store

import "context"

// FlowStats counts a flow's runs by status, as the v0.5 UI's flow list shows
// them. The counts are the sizes of the run index and of its per-status
// indexes, which every backend moves a run between in the same atomic step
// as the run's record (RunStore.UpdateRun): they are the runs list itself,
// so they cannot drift from it, and every instance reads the same.
type FlowStats struct {
	Total   int64 `json:"total"`
	Success int64 `json:"success"` // completed
	Failure int64 `json:"failure"` // failed
	Cancel  int64 `json:"cancel"`  // cancelled
	Running int64 `json:"running"`
	// Awaiting counts the runs whose steps all wait on an await.
	Awaiting int64 `json:"awaiting"`
	// LastRunAt is when the newest run started (epoch ms; 0: no run).
	LastRunAt int64 `json:"-"`
	// LastCompletedAt is the latest end among the newest run of each
	// terminal status (epoch ms; 0: none ended): a run that started
	// earlier and ended later than those is not seen, which costs three
	// reads rather than a scan.
	LastCompletedAt int64 `json:"-"`
}

// RunLister pages over a flow's runs; see RunStore.ListRuns.
type RunLister interface {
	ListRuns(ctx context.Context, flow, status string, offset, limit int) (RunPage, error)
}

// ReadFlowStats reads flow's stats from its run indexes. Errors are
// ListRuns's.
func ReadFlowStats(ctx context.Context, runs RunLister, flow string) (FlowStats, error) {
	var s FlowStats
	newest, err := runs.ListRuns(ctx, flow, "", 0, 1)
	if err != nil {
		return s, err
	}
	s.Total = newest.Total
	if len(newest.Runs) > 0 {
		s.LastRunAt = newest.Runs[0].StartedAt
	}
	for _, c := range []struct {
		status string
		n      *int64
		ends   bool
	}{
		{RunRunning, &s.Running, false},
		{RunAwaiting, &s.Awaiting, false},
		{RunCompleted, &s.Success, true},
		{RunFailed, &s.Failure, true},
		{RunCancelled, &s.Cancel, true},
	} {
		limit := 0 // a count only
		if c.ends {
			limit = 1
		}
		page, err := runs.ListRuns(ctx, flow, c.status, 0, limit)
		if err != nil {
			return s, err
		}
		*c.n = page.Total
		for _, m := range page.Runs {
			s.LastCompletedAt = max(s.LastCompletedAt, m.CompletedAt)
		}
	}
	return s, nil
}
