package engine_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/internal/pgtest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
)

// TestRepeatedReports: a worker that lost an answer repeats its report with
// the same lease; the repeat must answer as the first did and store nothing.
func TestRepeatedReports(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		ctx := t.Context()
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := newEngine(t, st, c)
		mustDefine(t, e, "example-flow", "example-flow")
		started, err := e.Start(ctx, "example-flow", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		claim := func(step string) store.JobAck {
			t.Helper()
			jobs, err := e.Claim(ctx, []string{"default"}, 1, 0)
			if err != nil || len(jobs) != 1 || jobs[0].Step != step {
				t.Fatalf("claim = %+v, %v; want %s", jobs, err, step)
			}
			return store.JobAck{Queue: jobs[0].Queue, ID: jobs[0].ID, Lease: jobs[0].Lease}
		}

		fetch := claim("fetch_data")
		batch := func() []event.Event {
			return []event.Event{
				{Kind: "step.started"},
				{Kind: "log", Data: json.RawMessage(`{"level":"info","msg":"one"}`)},
				{Kind: "emit", Data: json.RawMessage(`{"event":"fetch_data.completed","payload":{"rows":1}}`)},
				{Kind: "state.set", Data: json.RawMessage(`{"key":"rows","value":1}`)},
			}
		}
		first, err := e.Report(ctx, fetch, batch(), "report-1")
		if err != nil || len(first) != 4 {
			t.Fatalf("report = %d events, %v; want 4", len(first), err)
		}
		again, err := e.Report(ctx, fetch, batch(), "report-1")
		if err != nil {
			t.Fatalf("repeated report: %v", err)
		}
		// The events before the emit were written with it, so the repeat
		// answers with the emit too.
		if len(again) != len(first) {
			t.Fatalf("repeated report answered %+v, want the first one's events", again)
		}
		for i := range first {
			if again[i].ID != first[i].ID || again[i].Kind != first[i].Kind {
				t.Errorf("repeated report's event %d = %s %s, want %s %s", i, again[i].ID, again[i].Kind, first[i].ID, first[i].Kind)
			}
		}
		// Another key is another report: its log is stored, its emit is
		// not (an event counts once per run).
		if _, err := e.Report(ctx, fetch, batch()[1:3], "report-2"); err != nil {
			t.Fatal(err)
		}
		if err := e.Complete(ctx, fetch, json.RawMessage(`{"rows":1}`)); err != nil {
			t.Fatal(err)
		}
		if err := e.Complete(ctx, fetch, json.RawMessage(`{"rows":1}`)); err != nil {
			t.Errorf("repeated complete: %v, want success", err)
		}
		if err := e.Fail(ctx, fetch, "late", nil); !errors.Is(err, engine.ErrLeaseLost) {
			t.Errorf("fail after complete with the same lease: %v, want ErrLeaseLost", err)
		}

		proc := claim("process_data")
		if err := e.Fail(ctx, proc, "boom", nil); err != nil {
			t.Fatal(err)
		}
		if err := e.Fail(ctx, proc, "boom", nil); err != nil {
			t.Errorf("repeated fail: %v, want success", err)
		}
		if err := e.Complete(ctx, proc, nil); !errors.Is(err, engine.ErrLeaseLost) {
			t.Errorf("complete after fail with the same lease: %v, want ErrLeaseLost", err)
		}
		if err := e.Complete(ctx, store.JobAck{Queue: "default", ID: proc.ID, Lease: "another"}, nil); !errors.Is(err, engine.ErrLeaseLost) {
			t.Errorf("complete with a lease never given: %v, want ErrLeaseLost", err)
		}

		got := kinds(t, st, started.FlowID)
		want := map[string]int{
			"step.started fetch_data": 1, "log fetch_data": 2, "emit fetch_data": 1, "state.set fetch_data": 1,
			"step.completed fetch_data": 1, "step.failed process_data willRetry=false": 1, "flow.failed": 1,
		}
		for k, n := range want {
			if count(got, k) != n {
				t.Errorf("%d × %q, want %d; events %v", count(got, k), k, n, got)
			}
		}
	})
}

// TestReportWritesOnceWithItsEmit: the events a report carries ahead of an
// emit are written in the emit's run update, one write; a repeat of the
// report stores none of them again and answers as the first did.
func TestReportWritesOnceWithItsEmit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, inner engine.Store) {
		ctx := t.Context()
		st := &countingStore{Store: inner}
		e := newEngine(t, st, testkit.NewClock(time.UnixMilli(1_700_000_000_000)))
		mustDefine(t, e, "diamond", "diamond")
		run, err := e.Start(ctx, "diamond", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		jobs, err := e.Claim(ctx, []string{"default"}, 1, 0)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim = %+v, %v", jobs, err)
		}
		ack := store.JobAck{Queue: jobs[0].Queue, ID: jobs[0].ID, Lease: jobs[0].Lease}
		report := func() []event.Event {
			return []event.Event{
				{Kind: "step.started"},
				{Kind: "log", Data: json.RawMessage(`{"level":"info","msg":"go"}`)},
				{Kind: "emit", Data: json.RawMessage(`{"event":"step.a.trigger"}`)},
			}
		}
		st.appends.Store(0)
		st.updates.Store(0)
		first, err := e.Report(ctx, ack, report(), "k1")
		if err != nil || len(first) != 3 {
			t.Fatalf("report = %+v, %v", first, err)
		}
		if a, u := st.appends.Load(), st.updates.Load(); a != 0 || u != 1 {
			t.Errorf("the report made %d appends and %d run updates; want one run update", a, u)
		}
		again, err := e.Report(ctx, ack, report(), "k1")
		if err != nil || len(again) != len(first) {
			t.Fatalf("repeated report = %+v, %v; want %d events", again, err, len(first))
		}
		for i := range first {
			if again[i].ID != first[i].ID {
				t.Errorf("repeated report's event %d is %s, want %s", i, again[i].ID, first[i].ID)
			}
		}
		got := kinds(t, inner, run.FlowID)
		for _, k := range []string{"step.started start", "log start", "emit start"} {
			if count(got, k) != 1 {
				t.Errorf("%d × %q, want 1; events %v", count(got, k), k, got)
			}
		}
	})
}

// TestBadReportNamesTheField: a refused report says which event and why.
func TestBadReportNamesTheField(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		ctx := t.Context()
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := newEngine(t, st, c)
		mustDefine(t, e, "example-flow", "example-flow")
		if _, err := e.Start(ctx, "example-flow", nil, ""); err != nil {
			t.Fatal(err)
		}
		jobs, err := e.Claim(ctx, []string{"default"}, 1, 0)
		if err != nil || len(jobs) != 1 {
			t.Fatal(jobs, err)
		}
		ack := store.JobAck{Queue: jobs[0].Queue, ID: jobs[0].ID, Lease: jobs[0].Lease}
		for _, tc := range []struct {
			evs   []event.Event
			field string
		}{
			{[]event.Event{{Kind: "log"}, {Kind: "step.completed"}}, "events[1].kind"},
			{[]event.Event{{Kind: "emit", Data: json.RawMessage(`{"payload":1}`)}}, "events[0].data.event"},
		} {
			_, err := e.Report(ctx, ack, tc.evs, "")
			var re *engine.ReportError
			if !errors.As(err, &re) || re.Field != tc.field || !errors.Is(err, store.ErrInvalid) {
				t.Errorf("Report(%v) = %v, want a ReportError on %s", tc.evs, err, tc.field)
			}
		}
	})
}

// TestOutcomeCarriesEvents: fail stores the job's last progress events
// before the outcome, in one step; an emit is refused there.
func TestOutcomeCarriesEvents(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st engine.Store) {
		ctx := t.Context()
		c := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
		e := newEngine(t, st, c)
		mustDefine(t, e, "example-flow", "example-flow")
		started, err := e.Start(ctx, "example-flow", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		jobs, err := e.Claim(ctx, []string{"default"}, 1, 0)
		if err != nil || len(jobs) != 1 {
			t.Fatal(jobs, err)
		}
		ack := store.JobAck{Queue: jobs[0].Queue, ID: jobs[0].ID, Lease: jobs[0].Lease}
		emit := event.Event{Kind: "emit", Data: json.RawMessage(`{"event":"fetch_data.completed"}`)}
		var re *engine.ReportError
		if err := e.Fail(ctx, ack, "bad input", nil, emit); !errors.As(err, &re) || re.Field != "events[0].kind" {
			t.Errorf("fail with an emit: %v, want a ReportError on events[0].kind", err)
		}
		retriable := false
		if err := e.Fail(ctx, ack, "bad input", &retriable, event.Event{Kind: "step.started"}, event.Event{Kind: "log", Data: json.RawMessage(`{"msg":"last words"}`)}); err != nil {
			t.Fatal(err)
		}
		want := "flow.started, step.started fetch_data, log fetch_data, step.failed fetch_data willRetry=false, flow.failed"
		if got := strings.Join(kinds(t, st, started.FlowID), ", "); got != want {
			t.Errorf("events %s, want %s", got, want)
		}
	})
}

// TestCompleteDecidesItsEmits: emits sent with a completion are decided in
// the completion's one write: the steps they make ready are queued (with
// their awaits registered) and can be claimed by that completion, the run
// goes on, and a name counted before stores nothing.
func TestCompleteDecidesItsEmits(t *testing.T) {
	forEachBackend(t, completeDecidesItsEmits)
	// PostgreSQL checks the definition in the update and claims apart.
	t.Run("postgres", func(t *testing.T) { completeDecidesItsEmits(t, backendtest.OpenPostgres(t, pgtest.URL(t))) })
}

func completeDecidesItsEmits(t *testing.T, inner engine.Store) {
	ctx := t.Context()
	f := inner.Features()
	leased := f.EnqueuesLeased
	counting := &countingStore{Store: inner, features: store.Features{EnqueuesLeased: leased, ClaimsInUpdate: leased && f.ClaimsInUpdate}}
	var st engine.Store = counting
	e := newEngine(t, st, testkit.NewClock(time.UnixMilli(1_700_000_000_000)))
	mustDefine(t, e, "example-flow", "example-flow")
	run, err := e.Start(ctx, "example-flow", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := e.Claim(ctx, []string{"default"}, 1, 0)
	if err != nil || len(jobs) != 1 || jobs[0].Step != "fetch_data" {
		t.Fatalf("claim = %+v, %v", jobs, err)
	}
	emit := func(name, payload string) event.Event {
		return event.Event{Kind: "emit", Data: json.RawMessage(`{"event":"` + name + `","payload":` + payload + `}`)}
	}
	counting.appends.Store(0)
	counting.updates.Store(0)
	counting.claims.Store(0)
	fetch := store.JobAck{Queue: jobs[0].Queue, ID: jobs[0].ID, Lease: jobs[0].Lease}
	next, claimed, err := e.CompleteClaiming(ctx, fetch, json.RawMessage(`{"rows":2}`), engine.Next{Queues: []string{"default"}},
		event.Event{Kind: "step.started"}, emit("fetch_data.completed", `{"rows":2}`))
	if err != nil {
		t.Fatal(err)
	}
	if a, u := counting.appends.Load(), counting.updates.Load(); a != 0 || u != 1 {
		t.Errorf("the completion made %d appends and %d run updates; want one run update", a, u)
	}
	// A store that writes a job claimed (embedded, Redis) gives the
	// completion the step its emit made ready, in that update;
	// PostgreSQL leaves it to a claim of its own.
	if c := counting.claims.Load(); leased && (!claimed || len(next) != 1 || c != 0) {
		t.Errorf("the completion claimed %+v (%v, %d claims); want the step its emit made ready", next, claimed, c)
	}
	if !claimed {
		next, err = e.Claim(ctx, []string{"default"}, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(next) != 1 || next[0].Step != "process_data" || !strings.Contains(string(next[0].Input), `"rows":2`) {
		t.Fatalf("next job %+v; want process_data with the emit's payload", next)
	}

	// process_data's emit makes await_approval wait for its trigger; an
	// emit of a name counted before stores nothing.
	proc := store.JobAck{Queue: next[0].Queue, ID: next[0].ID, Lease: next[0].Lease}
	if err := e.Complete(ctx, proc, nil, event.Event{Kind: "step.started"},
		emit("fetch_data.completed", `{"rows":3}`), emit("process_data.completed", `null`)); err != nil {
		t.Fatal(err)
	}
	got := kinds(t, st, run.FlowID)
	want := "flow.started, step.started fetch_data, emit fetch_data, step.completed fetch_data, " +
		"step.started process_data, emit process_data, step.await.trigger await_approval, step.completed process_data"
	if strings.Join(got, ", ") != want {
		t.Errorf("events %s, want %s", strings.Join(got, ", "), want)
	}
	waits, err := e.Waits(ctx, engine.WaitQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(waits) != 1 || waits[0].Step != "await_approval" || waits[0].TriggerID == "" {
		t.Errorf("waits %+v; want await_approval's trigger", waits)
	}
	if err := e.Complete(ctx, proc, nil, emit("process_data.completed", `null`)); err != nil {
		t.Errorf("repeated completion: %v, want success", err)
	}
	if again := kinds(t, st, run.FlowID); len(again) != len(got) {
		t.Errorf("a repeated completion stored %v", again[len(got):])
	}
}
