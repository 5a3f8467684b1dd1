package reducers_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/reducers"
)

// longRun is a flow run of n events shaped like a busy real one: steps that
// start, log, write KV state, emit and complete, logs being most of it.
func longRun(n int) []event.Event {
	evs := make([]event.Event, 0, n)
	add := func(kind, step, data string) {
		e := event.Event{ID: event.ID{MS: uint64(1_700_000_000_000 + len(evs))}, Kind: kind, Subject: "run", RunID: "run", FlowName: "bench", Step: step}
		if data != "" {
			e.Data = json.RawMessage(data)
		}
		evs = append(evs, e)
	}
	add("flow.started", "", `{"name":"bench","input":{"n":1}}`)
	for i := 0; len(evs) < n-1; i++ {
		step := fmt.Sprintf("step_%d", i%40)
		add("step.started", step, `{"jobId":"1"}`)
		for j := 0; j < 6 && len(evs) < n-4; j++ {
			add("log", step, fmt.Sprintf(`{"level":"info","message":"progress %d/6","progress":%d}`, j, j))
		}
		add("state.set", step, fmt.Sprintf(`{"key":"k%d","value":{"i":%d,"ok":true}}`, i%25, i))
		add("emit", step, fmt.Sprintf(`{"event":"%s.done","payload":{"i":%d}}`, step, i))
		add("step.completed", step, `{"result":{"ok":true}}`)
	}
	add("flow.completed", "", `{}`)
	return evs[:n]
}

// BenchmarkFold measures replay: folding a 10,000-event run from nothing, as a
// cold cache does.
func BenchmarkFold(b *testing.B) {
	evs := longRun(10_000)
	r := reducers.Flow{}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reducers.Fold(r, evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(evs))/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkApplyLive measures the live path: one event at a time onto a cached
// state that already holds a long run.
func BenchmarkApplyLive(b *testing.B) {
	evs := longRun(20_000)
	r := reducers.Flow{}
	cached, err := reducers.Fold(r, evs[:10_000])
	if err != nil {
		b.Fatal(err)
	}
	live := evs[10_000:]
	b.ReportAllocs()
	s, i := cached, 0
	for b.Loop() {
		if i == len(live) {
			s, i = cached, 0
		}
		if s, err = r.Apply(s, live[i]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkMarshal measures writing a long run's state as the API does.
func BenchmarkMarshal(b *testing.B) {
	s, err := reducers.Fold(reducers.Flow{}, longRun(10_000))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(s); err != nil {
			b.Fatal(err)
		}
	}
}
