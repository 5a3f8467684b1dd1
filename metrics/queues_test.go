package metrics

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nqd-dev/nqd/store"
)

type fakeQueueStats map[string]store.QueueDepth

func (f fakeQueueStats) QueueDepth(_ context.Context, q string, _ int64) (store.QueueDepth, error) {
	d, ok := f[q]
	if !ok {
		return store.QueueDepth{}, errors.New("unreachable")
	}
	return d, nil
}

func TestWatchQueues(t *testing.T) {
	m := New()
	stats := fakeQueueStats{"default": {Jobs: 5, Due: 2}, "gpu": {}}
	err := m.WatchQueues(stats, func(context.Context) ([]string, error) { return []string{"default", "gpu", "broken"}, nil },
		func(context.Context) (map[string]int, error) { return map[string]int{"gpu": 2}, nil })
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`nqd_queue_jobs{queue="default"} 5`,
		`nqd_queue_due{queue="default"} 2`,
		`nqd_queue_jobs{queue="gpu"} 0`,
		// default has jobs due and no worker; gpu has workers and no jobs.
		`nqd_queue_workers{queue="default"} 0`,
		`nqd_queue_unserved{queue="default"} 1`,
		`nqd_queue_workers{queue="gpu"} 2`,
		`nqd_queue_unserved{queue="gpu"} 0`,
		`nqd_queue_stats_errors_total 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
