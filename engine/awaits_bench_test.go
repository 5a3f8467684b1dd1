package engine_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
	"github.com/nqd-dev/nqd/store/redisstore"
)

// BenchmarkTriggerToResumed measures a trigger POST's path to its live
// subscribers: from FireTrigger's call until step.resumed arrives on a
// subscription to the run's stream (what an SSE client is fed from). It
// reports the p50 and p99 of that latency.
func BenchmarkTriggerToResumed(b *testing.B) {
	stores := map[string]func(b *testing.B) engine.Store{
		"bolt": func(b *testing.B) engine.Store {
			return bolttest.Open(b, boltstore.Options{})
		},
		"redis": func(b *testing.B) engine.Store {
			s, err := redisstore.New(redistest.Client(b), redisstore.Options{Prefix: redistest.Prefix(b), Logger: zerolog.Nop()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s
		},
	}
	for name, newStore := range stores {
		b.Run(name, func(b *testing.B) {
			st := newStore(b)
			e := engine.New(st, engine.Options{Logger: zerolog.Nop()})
			d := &flows.Definition{Name: "approve", Entry: "start", Steps: map[string]flows.Step{
				"start": {Queue: "default", Emits: []string{"started"}},
				"wait":  {Queue: "default", Subscribes: []string{"started"}, Await: &flows.Await{Type: "trigger"}},
			}}
			if err := e.PutDefinition(b.Context(), d); err != nil {
				b.Fatal(err)
			}
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				b.StopTimer()
				s, err := e.Start(b.Context(), "approve", nil, "")
				if err != nil {
					b.Fatal(err)
				}
				jobs, err := e.Claim(b.Context(), []string{"default"}, 10, 0)
				if err != nil {
					b.Fatal(err)
				}
				var id string
				for _, j := range jobs {
					ack := store.JobAck{Queue: j.Queue, ID: j.ID, Lease: j.Lease}
					if j.Step == "start" {
						if _, err := e.Report(b.Context(), ack, emitEvents("started"), ""); err != nil {
							b.Fatal(err)
						}
					}
					if err := e.Complete(b.Context(), ack, nil); err != nil {
						b.Fatal(err)
					}
				}
				evs, err := testkit.RangeKinds(b.Context(), st, store.Context{Type: "flow", ID: s.FlowID}, "step.await.trigger")
				if err != nil || len(evs) != 1 {
					b.Fatalf("await: %v %v", evs, err)
				}
				var data struct{ TriggerID string }
				_ = json.Unmarshal(evs[0].Data, &data)
				id = data.TriggerID
				sub, err := st.Subscribe(b.Context(), store.Context{Type: "flow", ID: s.FlowID}, 16)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				t0 := time.Now()
				if _, err := e.FireTrigger(b.Context(), id, json.RawMessage(`{"ok":true}`), engine.TriggerSource{}); err != nil {
					b.Fatal(err)
				}
				for {
					ev, err := store.Receive(b.Context(), sub)
					if err != nil || ev.Kind == "step.resumed" {
						break
					}
				}
				lat = append(lat, time.Since(t0))
				b.StopTimer()
				sub.Close()
				b.StartTimer()
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// BenchmarkTimerLateness measures how late time awaits resume on the real
// clock with the engine's default tick: 100 runs each wait 300 ms, and the
// lateness is step.resumed's store time minus the await's resume time.
func BenchmarkTimerLateness(b *testing.B) {
	st := bolttest.Open(b, boltstore.Options{})
	e := engine.New(st, engine.Options{Logger: zerolog.Nop()})
	go func() { _ = e.Run(b.Context()) }()
	if err := e.PutDefinition(b.Context(), &flows.Definition{Name: "later", Entry: "wait", Steps: map[string]flows.Step{
		"wait": {Queue: "default", Await: &flows.Await{Type: "time", Delay: 300}},
	}}); err != nil {
		b.Fatal(err)
	}
	var late []time.Duration
	for b.Loop() {
		var runs []string
		for range 100 {
			s, err := e.Start(b.Context(), "later", nil, "")
			if err != nil {
				b.Fatal(err)
			}
			runs = append(runs, s.FlowID)
		}
		for _, run := range runs {
			c := store.Context{Type: "flow", ID: run}
			sub, err := st.Subscribe(b.Context(), c, 16)
			if err != nil {
				b.Fatal(err)
			}
			evs, err := st.Range(b.Context(), c, store.RangeQuery{})
			if err != nil {
				b.Fatal(err)
			}
			var resumeAt time.Time
			var resumed time.Time
			for _, ev := range evs {
				switch ev.Kind {
				case "step.await.time":
					var d struct{ ResumeAt time.Time }
					_ = json.Unmarshal(ev.Data, &d)
					resumeAt = d.ResumeAt
				case "step.resumed":
					resumed = ev.Time()
				}
			}
			for resumed.IsZero() {
				ev, err := store.Receive(b.Context(), sub)
				if err != nil {
					b.Fatalf("subscription ended: %v", err)
				}
				if ev.Kind == "step.resumed" {
					resumed = ev.Time()
				}
			}
			sub.Close()
			late = append(late, resumed.Sub(resumeAt))
		}
	}
	slices.Sort(late)
	b.ReportMetric(float64(late[len(late)/2].Microseconds())/1000, "p50-late-ms")
	b.ReportMetric(float64(late[len(late)*99/100].Microseconds())/1000, "p99-late-ms")
	b.ReportMetric(float64(late[len(late)-1].Microseconds())/1000, "max-late-ms")
}
