package wiring_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/config"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/metrics"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
	"github.com/nqd-dev/nqd/wiring"
)

// TestStartSweeperRepairsOrphan: a terminal event that reached the stream
// without its record write is repaired by the sweeper's first sweep, which
// runs when it starts, well within one interval.
func TestStartSweeperRepairsOrphan(t *testing.T) {
	cfg := config.Config{SweepInterval: time.Hour, StallAfter: time.Hour}
	st := bolttest.Open(t, boltstore.Options{})
	log := testkit.Logger(t)
	e := engine.New(st, engine.Options{Logger: log})
	d := &flows.Definition{Name: "f", Entry: "a", Steps: map[string]flows.Step{"a": {Queue: "default"}}}
	if err := e.PutDefinition(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	s, err := e.Start(t.Context(), "f", json.RawMessage(`{}`), "")
	if err != nil {
		t.Fatal(err)
	}
	end := event.Event{Kind: "flow.completed", Subject: s.FlowID, RunID: s.FlowID, FlowName: "f", Data: json.RawMessage(`{}`)}
	if _, err := st.Append(t.Context(), store.Context{Type: "flow", ID: s.FlowID}, []event.Event{end}, store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}

	m := metrics.New()
	stop, err := wiring.StartSweeper(t.Context(), e, st, cfg, m, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	wait.For(t, 20*time.Second, 20*time.Millisecond, "the sweeper to repair the record to completed", func() bool {
		meta, err := st.RunMeta(t.Context(), "f", s.FlowID)
		if err != nil {
			t.Fatal(err)
		}
		return meta.Status == store.RunCompleted
	})
	if _, err := st.Get(t.Context(), "nqd.sweeper.lease"); err != nil {
		t.Errorf("the sweeper took no lease in the KV store: %v", err)
	}
}
