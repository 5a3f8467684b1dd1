package engine

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows/flowstest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
)

// TestRememberedStateIsTheRecords: the decoded state a commit leaves for
// the next decision about its run is the state a decision reading the
// written record would decode, step by step through a run whose input and
// emits carry JSON the way clients send it.
func TestRememberedStateIsTheRecords(t *testing.T) {
	ctx := t.Context()
	st := bolttest.Open(t, boltstore.Options{})
	c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
	e := New(st, Options{Now: c.Now, Lease: 10 * time.Second, Logger: testkit.Logger(t)})
	defs := flowstest.Define(t, e, "../flows/testdata")
	checked := 0
	check := func(when string) {
		t.Helper()
		e.recent.mu.Lock()
		defer e.recent.mu.Unlock()
		for k, rr := range e.recent.runs {
			if rr.state == nil {
				continue
			}
			want, err := decodeRun(rr.meta, k)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(&want.state, rr.state) {
				t.Errorf("%s: remembered state %+v, the record decodes to %+v", when, *rr.state, want.state)
			}
			checked++
		}
	}
	emitsOf := map[string][]string{}
	for _, d := range defs {
		for name, step := range d.Steps {
			emitsOf[d.Name+"/"+name] = step.Emits
		}
	}
	// work runs the jobs of flow until none is ready, each emitting what its
	// step declares, and checks after every decision.
	work := func(flow string) {
		for {
			jobs, err := e.Claim(ctx, []string{"default"}, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(jobs) == 0 {
				return
			}
			j := jobs[0]
			ack := store.JobAck{Queue: j.Queue, ID: j.ID, Lease: j.Lease}
			for _, name := range emitsOf[flow+"/"+j.Step] {
				ev := event.Event{Kind: "emit", Data: json.RawMessage(`{"event": "` + name + `", "payload": { "value" : 2, "html": "<b>&amp;</b>` + "\u2028" + `" }}`)}
				if _, err := e.Report(ctx, ack, []event.Event{{Kind: "step.started"}, ev}, ""); err != nil {
					t.Fatal(err)
				}
				check(j.Step + " emits " + name)
			}
			if err := e.Complete(ctx, ack, json.RawMessage(`{ "ok" : true }`)); err != nil {
				t.Fatal(err)
			}
			check(j.Step + " completes")
		}
	}
	input := json.RawMessage(`{ "n" : 1,  "tags": [ "a", "b" ] }`)
	diamond, err := e.Start(ctx, "diamond", input, "")
	if err != nil {
		t.Fatal(err)
	}
	check("start")
	work("diamond")

	// A run that waits on a trigger keeps the await's input and, once the
	// trigger fired, its outcome in its state.
	awaiting, err := e.Start(ctx, "example-flow", input, "")
	if err != nil {
		t.Fatal(err)
	}
	work("example-flow")
	var trigger string
	e.recent.mu.Lock()
	for _, rr := range e.recent.runs {
		if rr.meta.RunID == awaiting.FlowID && rr.state != nil {
			for id := range rr.state.Awaits {
				trigger = id
			}
		}
	}
	e.recent.mu.Unlock()
	if trigger == "" {
		t.Fatal("no remembered await of the example flow's run")
	}
	if _, err := e.FireTrigger(ctx, trigger, json.RawMessage(`{ "approved" : true }`), TriggerSource{}); err != nil {
		t.Fatal(err)
	}
	check("trigger fired")
	work("example-flow")
	for flow, run := range map[string]Started{"diamond": diamond, "example-flow": awaiting} {
		m, err := st.RunMeta(ctx, flow, run.FlowID)
		if err != nil || m.Status != store.RunCompleted {
			t.Errorf("run of %s = %+v, %v; want it completed", flow, m, err)
		}
	}
	if checked < 12 {
		t.Errorf("checked %d remembered states; want one after each of the run's decisions", checked)
	}
}
