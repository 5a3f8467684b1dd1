package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/store"
)

const lookback = 5 * time.Second

func eventEngine(t *testing.T, st engine.Store, c *testkit.Clock) *engine.Engine {
	t.Helper()
	e := engine.New(st, engine.Options{Now: c.Now, Lease: 10 * time.Second, EventLookback: lookback, EventPoll: time.Second})
	awaitFlow(t, e, "paid", &flows.Await{Type: "event", EventKind: "order.paid", Where: `event.data.orderId == input.orderId`})
	return e
}

// publish appends an order.paid for orderID and returns its id.
func publish(t *testing.T, st engine.Store, orderID string) event.ID {
	t.Helper()
	res, err := st.Append(t.Context(), store.Context{Type: "order", ID: orderID}, []event.Event{{
		Kind: "order.paid", Subject: orderID, Data: json.RawMessage(fmt.Sprintf(`{"orderId":%q}`, orderID)),
	}}, store.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return res.Events[0].ID
}

// resumedBy returns the event ids the run's step.resumed events name.
func resumedBy(t *testing.T, st engine.Store, run string) []string {
	t.Helper()
	evs, err := testkit.RangeKinds(t.Context(), st, store.Context{Type: "flow", ID: run}, "step.resumed")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		var d struct {
			EventID string `json:"eventId"`
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d.EventID)
	}
	return out
}

// runStart runs the entry step of run, passing over (and keeping
// claimed) the jobs of other runs that wait in the same queue.
func runStart(t *testing.T, e *engine.Engine, run string) {
	t.Helper()
	for range 20 {
		jobs, err := e.Claim(t.Context(), []string{"default"}, 1, 0)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim: %v %v", jobs, err)
		}
		if jobs[0].RunID != run || jobs[0].Step != "start" {
			continue
		}
		ack := store.JobAck{Queue: jobs[0].Queue, ID: jobs[0].ID, Lease: jobs[0].Lease}
		if _, err := e.Report(t.Context(), ack, emitEvents("started"), ""); err != nil {
			t.Fatal(err)
		}
		if err := e.Complete(t.Context(), ack, nil); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("no entry job for run %s", run)
}

// tick runs the engine's due timers n times, a poll interval apart.
func tick(t *testing.T, e *engine.Engine, c *testkit.Clock, n int) {
	t.Helper()
	for range n {
		if err := e.Tick(t.Context()); err != nil {
			t.Fatal(err)
		}
		c.Add(time.Second)
	}
}

func TestEventAwaitLookback(t *testing.T) {
	cases := []struct {
		name   string
		before time.Duration // how long before registration the event was published
		want   bool
	}{
		{"0ms", 0, true},
		{"1ms", time.Millisecond, true},
		{"100ms", 100 * time.Millisecond, true},
		{"lookback-1ms", lookback - time.Millisecond, true},
		{"lookback+1ms", lookback + time.Millisecond, false},
	}
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				order := fmt.Sprintf("o-%d", i)
				c := testkit.NewClock(time.Time{})
				e := eventEngine(t, st, c) // stored first: its kind is watched
				id := publish(t, st, order)
				c.Set(id.Time().Add(tc.before))
				s, err := e.Start(t.Context(), "paid", json.RawMessage(fmt.Sprintf(`{"orderId":%q}`, order)), "")
				if err != nil {
					t.Fatal(err)
				}
				runStart(t, e, s.FlowID)
				tick(t, e, c, 3)
				got := resumedBy(t, st, s.FlowID)
				switch {
				case tc.want && (len(got) != 1 || got[0] != id.String()):
					t.Fatalf("resumed by %v, want once by %v", got, id)
				case !tc.want && len(got) != 0:
					t.Fatalf("resumed by %v, want not resumed: the event is outside the look-back window", got)
				}
			})
		}
	})
}

func TestEventAwaitAfterRegistration(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		c := testkit.NewClock(time.Now())
		e := eventEngine(t, st, c)
		s, err := e.Start(t.Context(), "paid", json.RawMessage(`{"orderId":"late"}`), "")
		if err != nil {
			t.Fatal(err)
		}
		runEntry(t, e)
		publish(t, st, "other") // does not match the condition
		tick(t, e, c, 2)
		if got := resumedBy(t, st, s.FlowID); len(got) != 0 {
			t.Fatalf("resumed by %v before its event", got)
		}
		id := publish(t, st, "late")
		tick(t, e, c, 2)
		if got := resumedBy(t, st, s.FlowID); len(got) != 1 || got[0] != id.String() {
			t.Fatalf("resumed by %v, want once by %v", got, id)
		}
		jobs, err := e.Claim(t.Context(), []string{"default"}, 1, 0)
		if err != nil || len(jobs) != 1 || jobs[0].Step != "wait" {
			t.Fatalf("claim after resume: %+v, %v", jobs, err)
		}
		var in struct {
			Resume struct {
				Event struct {
					ID string `json:"id"`
				} `json:"event"`
			} `json:"_resume"`
		}
		if err := json.Unmarshal(jobs[0].Input, &in); err != nil || in.Resume.Event.ID != id.String() {
			t.Fatalf("step input %s (%v): want the event in _resume", jobs[0].Input, err)
		}
	})
}

func TestEventAwaitConsumesOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		c := testkit.NewClock(time.Time{})
		e := eventEngine(t, st, c)
		first := publish(t, st, "shared")
		second := publish(t, st, "shared")
		c.Set(second.Time())
		start := func() string {
			s, err := e.Start(t.Context(), "paid", json.RawMessage(`{"orderId":"shared"}`), "")
			if err != nil {
				t.Fatal(err)
			}
			runStart(t, e, s.FlowID)
			return s.FlowID
		}
		a := start()
		tick(t, e, c, 2)
		if got := resumedBy(t, st, a); len(got) != 1 || got[0] != first.String() {
			t.Fatalf("first waiter resumed by %v, want once by the first event %v", got, first)
		}
		entries, err := st.(store.KindIndex).KindEvents(t.Context(), "order.paid", event.ID{}, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range entries {
			if en.Event.ID == second && en.Consumed {
				t.Fatalf("the second event was consumed too")
			}
		}
		// Two more waiters, one event left: one of them takes it.
		b, d := start(), start()
		tick(t, e, c, 2)
		gb, gd := resumedBy(t, st, b), resumedBy(t, st, d)
		if len(gb)+len(gd) != 1 || append(gb, gd...)[0] != second.String() {
			t.Fatalf("later waiters resumed by %v and %v, want one of them once by %v", gb, gd, second)
		}
		if got := resumedBy(t, st, a); len(got) != 1 {
			t.Fatalf("first waiter resumed %d times", len(got))
		}
	})
}

func TestEventAwaitTwoEnginesOneEvent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		c := testkit.NewClock(time.Time{})
		e1 := eventEngine(t, st, c)
		id := publish(t, st, "race")
		c.Set(id.Time())
		e2 := engine.New(st, engine.Options{Now: c.Now, Lease: 10 * time.Second, EventLookback: lookback})
		var runs []string
		for range 4 {
			s, err := e1.Start(t.Context(), "paid", json.RawMessage(`{"orderId":"race"}`), "")
			if err != nil {
				t.Fatal(err)
			}
			runStart(t, e1, s.FlowID)
			runs = append(runs, s.FlowID)
		}
		done := make(chan error, 2)
		for _, e := range []*engine.Engine{e1, e2} {
			go func() { done <- e.Tick(t.Context()) }()
		}
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		tick(t, e1, c, 2)
		resumed := 0
		for _, r := range runs {
			resumed += len(resumedBy(t, st, r))
		}
		if resumed != 1 {
			t.Fatalf("%d resumes for one event, want 1", resumed)
		}
	})
}

// paidIndexed reports whether an order.paid appended now is indexed.
func paidIndexed(t *testing.T, st engine.Store, order string) bool {
	t.Helper()
	id := publish(t, st, order)
	entries, err := st.(store.KindIndex).KindEvents(t.Context(), "order.paid", event.ID{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if en.Event.ID == id {
			return true
		}
	}
	return false
}

func TestEventAwaitWatchesItsKind(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		if paidIndexed(t, st, "before") {
			t.Fatal("indexed before any definition awaits the kind")
		}
		eventEngine(t, st, testkit.NewClock(time.Now()))
		if !paidIndexed(t, st, "after") {
			t.Fatal("not indexed once a definition awaiting it is stored")
		}
	})
}

func TestEventAwaitRunWatchesStoredDefinitions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		// Stored past the engine, as by a version that did not watch kinds.
		d := &flows.Definition{Name: "paid", Entry: "start", Steps: map[string]flows.Step{
			"start": {Queue: "default", Emits: []string{"started"}},
			"wait":  {Queue: "default", Subscribes: []string{"started"}, Await: &flows.Await{Type: "event", EventKind: "order.paid"}},
		}}
		body, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.PutDefinition(t.Context(), d.Name, body); err != nil {
			t.Fatal(err)
		}
		if paidIndexed(t, st, "before") {
			t.Fatal("indexed before the engine ran")
		}
		e := engine.New(st, engine.Options{Interval: time.Hour})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- e.Run(ctx) }()
		defer func() { cancel(); <-done }()
		n := 0
		wait.For(t, 10*time.Second, 10*time.Millisecond, "Run to watch the stored definition's kind", func() bool {
			n++
			return paidIndexed(t, st, fmt.Sprintf("after-%d", n))
		})
	})
}
