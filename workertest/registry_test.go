package workertest_test

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/sdk/go/worker"
)

// The Go worker names itself by its headers, so nqd's worker registry lists
// it with its SDK, host, queues and concurrency, and shows it left once it
// stops.
func TestWorkerIsListed(t *testing.T) {
	n := startNQD(t)
	stop, result := runWorker(t, n.base, worker.Config{Queues: []string{"q1", "q2"}, Concurrency: 3}, map[string]worker.Handler{})
	type listed struct {
		ID, Name, SDK, Version, Host, Transport, Status string
		Queues                                          []string
		Concurrency                                     int
	}
	var got struct{ Workers []listed }
	wait.For(t, 20*time.Second, 20*time.Millisecond, "the worker to be listed", func() bool {
		return n.do(http.MethodGet, "/api/_workers", nil, &got) == http.StatusOK && len(got.Workers) == 1
	})
	w := got.Workers[0]
	transport := "channel"
	if os.Getenv(transportEnv) == "http" {
		transport = "http"
	}
	if w.SDK != "go" || w.Version == "" || w.Host == "" || w.Transport != transport || w.Status != "active" ||
		w.Concurrency != 3 || strings.Join(w.Queues, ",") != "q1,q2" || !strings.Contains(w.ID, "-") {
		t.Fatalf("listed %+v", w)
	}
	stop()
	if err := <-result; err != nil {
		t.Fatalf("worker: %v", err)
	}
	// The channel's close and the goodbye may both record the departure;
	// the one that loses returns before the winner has written it.
	wait.For(t, 20*time.Second, 20*time.Millisecond, "the worker shown left", func() bool {
		return n.do(http.MethodGet, "/api/_workers?status=left", nil, &got) == http.StatusOK && len(got.Workers) == 1 && got.Workers[0].ID == w.ID
	})
}
