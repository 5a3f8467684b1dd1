package wiring_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/config"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/registry"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
	"github.com/nqd-dev/nqd/wiring"
)

// TestStartWorkersTakesTheSettings: the registry sweeps at the configured
// heartbeat and marks a silent worker lost after the configured timeout,
// not after the defaults' minute.
func TestStartWorkersTakesTheSettings(t *testing.T) {
	cfg := config.Config{WorkerHeartbeat: 20 * time.Millisecond, WorkerLostAfter: 100 * time.Millisecond, WorkerRetain: time.Hour}
	st := bolttest.Open(t, boltstore.Options{})
	reg, stop := wiring.StartWorkers(t.Context(), cfg, st, testkit.Logger(t))
	defer stop()
	if reg.Interval() != cfg.WorkerHeartbeat || reg.LostAfter() != cfg.WorkerLostAfter {
		t.Fatalf("registry interval %s, lost after %s; want the settings", reg.Interval(), reg.LostAfter())
	}
	if err := reg.Arrive(t.Context(), registry.Hello{ID: "w1", Queues: []string{"q"}, Transport: registry.TransportChannel}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, 20*time.Millisecond, "the silent worker to be marked lost", func() bool {
		evs, err := st.Range(t.Context(), registry.Stream, store.RangeQuery{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			var rec registry.Record
			if ev.Kind == registry.KindLeft && json.Unmarshal(ev.Data, &rec) == nil && rec.Reason == registry.ReasonLost {
				return true
			}
		}
		return false
	})
}
