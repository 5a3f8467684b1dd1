package handlers_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/handlers"
)

// withState gives the API a snapshot cache over its own store.
func withState(t testing.TB) func(*handlers.Deps) {
	return func(d *handlers.Deps) { d.State = newStates(t, d.Store) }
}

// trainingScenario is reducers/testdata/seed000_training.txt: a run of the
// ml-training example (examples/flows/ml-training.yaml) that keeps its
// progress in the run's state, with the states the reducers expect at its
// points in time.
type trainingScenario struct {
	events []struct {
		at   time.Time
		body string
	}
	outputs map[string]string // command line -> expected JSON
}

func loadTrainingScenario(t *testing.T) trainingScenario {
	t.Helper()
	raw, err := os.ReadFile("../reducers/testdata/seed000_training.txt")
	if err != nil {
		t.Fatal(err)
	}
	sc := trainingScenario{outputs: map[string]string{}}
	for block := range strings.SplitSeq(string(raw), "\n\n") {
		var lines []string
		for l := range strings.SplitSeq(strings.TrimSpace(block), "\n") {
			if !strings.HasPrefix(l, "#") {
				lines = append(lines, l)
			}
		}
		if len(lines) == 0 {
			continue
		}
		switch cmd := lines[0]; {
		case cmd == "events":
			for _, l := range lines[1:] {
				ts, body, _ := strings.Cut(l, " ")
				at, err := time.Parse(time.RFC3339, ts)
				if err != nil {
					t.Fatal(err)
				}
				sc.events = append(sc.events, struct {
					at   time.Time
					body string
				}{at, body})
			}
		case len(lines) > 2 && lines[1] == "----":
			sc.outputs[cmd] = withLogTextAliases(t, strings.Join(lines[2:], "\n"))
		}
	}
	if len(sc.events) != 15 || len(sc.outputs) != 3 {
		t.Fatalf("scenario has %d events and %d outputs, want 15 and 3", len(sc.events), len(sc.outputs))
	}
	return sc
}

// withLogTextAliases adds to the scenario's expected log entries the `msg`
// that the API writes beside `message` (the reducer folds what it is given:
// the scenario's events carry only `message`).
func withLogTextAliases(t *testing.T, want string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(want), &v); err != nil {
		t.Fatalf("expected output: %v", err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if data, ok := v["data"].(map[string]any); ok && v["level"] != nil {
				if m, ok := data["message"]; ok {
					if _, ok := data["msg"]; !ok {
						data["msg"] = m
					}
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(v)
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func jsonCmp(t *testing.T, what string, want string, got json.RawMessage) {
	t.Helper()
	var w, g any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: expected output: %v", what, err)
	}
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if diff := cmp.Diff(w, g); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// TestMLTrainingTimeTravel runs the ml-training run through the API: at 10:00:03
// the run's KV state is {status: training, epoch: 2, accuracy: 0.92}, in
// every spelling of the point and on every route that takes one.
func TestMLTrainingTimeTravel(t *testing.T) {
	sc := loadTrainingScenario(t)
	api := newTestAPI(t, withState(t))
	for _, e := range sc.events {
		api.clock.Set(e.at)
		wantStatus(t, api.do(t, post("/api/_events/flow/abc-123", e.body)), http.StatusCreated)
	}
	past := sc.outputs["state at=2025-11-05T10:00:03Z"]

	type stateAnswer struct {
		Type, ID    string
		At          *string
		LastEventID *string
		State       json.RawMessage
	}
	for _, at := range []string{"2025-11-05T10:00:03Z", "2025-11-05T10:00:03.999Z", "2025-11-05T12:00:03%2B02:00", "1762336803000", "1762336803000-2"} {
		rec := api.do(t, get("/api/_events/flow/abc-123/state?at="+at))
		wantStatus(t, rec, http.StatusOK)
		got := decode[stateAnswer](t, rec)
		jsonCmp(t, "state at="+at, past, got.State)
		if got.LastEventID == nil || *got.LastEventID != "1762336803000-2" || got.At == nil {
			t.Errorf("at=%s: lastEventId %v, at %v; want 1762336803000-2 and the point", at, got.LastEventID, got.At)
		}

		rec = api.do(t, get("/api/_events/flow/abc-123?at="+at))
		wantStatus(t, rec, http.StatusOK)
		ctx := decode[struct {
			EventCount  int
			LastEventID string
			State       json.RawMessage
			Events      []struct{ ID string }
		}](t, rec)
		jsonCmp(t, "context at="+at, past, ctx.State)
		if ctx.EventCount != 10 || ctx.LastEventID != "1762336803000-2" || len(ctx.Events) != 10 ||
			ctx.Events[9].ID != "1762336803000-2" {
			t.Errorf("context at=%s: %d events, last %s, %d listed; want 10 up to 1762336803000-2",
				at, ctx.EventCount, ctx.LastEventID, len(ctx.Events))
		}
	}

	rec := api.do(t, get("/api/_events/flow/abc-123/state"))
	wantStatus(t, rec, http.StatusOK)
	now := decode[stateAnswer](t, rec)
	jsonCmp(t, "state", sc.outputs["state"], now.State)
	if now.At != nil || now.LastEventID == nil || *now.LastEventID != "1762336810000-3" {
		t.Errorf("newest state: at %v, lastEventId %v; want null and 1762336810000-3", now.At, now.LastEventID)
	}

	rec = api.do(t, get("/api/_events/flow/abc-123"))
	wantStatus(t, rec, http.StatusOK)
	jsonCmp(t, "context state", sc.outputs["state"], decode[struct{ State json.RawMessage }](t, rec).State)

	rec = api.do(t, get("/api/_events/flow/abc-123/state/diff?from=2025-11-05T10:00:03Z&to=2025-11-05T10:00:10Z"))
	wantStatus(t, rec, http.StatusOK)
	diff := decode[struct {
		From, To string
		Diff     json.RawMessage
	}](t, rec)
	jsonCmp(t, "diff", sc.outputs["diff from=2025-11-05T10:00:03Z to=2025-11-05T10:00:10Z"], diff.Diff)
	if diff.From != "1762336803000-2" || diff.To != "1762336810000-3" {
		t.Errorf("diff between %s and %s, want 1762336803000-2 and 1762336810000-3", diff.From, diff.To)
	}

	// Before the first event there is nothing; a diff from there adds it all.
	rec = api.do(t, get("/api/_events/flow/abc-123?at=2025-11-05T09:59:59Z"))
	wantStatus(t, rec, http.StatusOK)
	if b := decode[map[string]any](t, rec); b["eventCount"] != 0.0 || b["lastEventId"] != nil || len(b["events"].([]any)) != 0 {
		t.Errorf("context before its first event: %v", b)
	}
	rec = api.do(t, get("/api/_events/flow/abc-123/state/diff"))
	wantStatus(t, rec, http.StatusOK)
	whole := decode[map[string]any](t, rec)
	if whole["from"] != nil || whole["to"] != "1762336810000-3" {
		t.Errorf("diff with no bounds: from %v to %v, want null and the last event", whole["from"], whole["to"])
	}
}

// TestStateReadsYourWrites: each answer holds the append made just before it.
func TestStateReadsYourWrites(t *testing.T) {
	api := newTestAPI(t, withState(t))
	for i := range 5 {
		api.clock.Set(epoch.Add(timeMS(i)))
		body := `{"kind":"state.set","data":{"key":"n","value":` + string(rune('0'+i)) + `}}`
		wantStatus(t, api.do(t, post("/api/_events/flow/r1", body)), http.StatusCreated)
		for _, target := range []string{"/api/_events/flow/r1/state", "/api/_events/flow/r1"} {
			rec := api.do(t, get(target))
			wantStatus(t, rec, http.StatusOK)
			got := decode[struct {
				State struct {
					State      map[string]int
					EventCount int
				}
			}](t, rec)
			if got.State.State["n"] != i || got.State.EventCount != i+1 {
				t.Fatalf("%s after append %d: %+v", target, i, got.State)
			}
		}
	}
}

// TestStateOfUnknownContext: a run nobody started has no state to read (its
// initial one would say running), while the context route answers it with no
// events, as the v0.3 UI expects right after a start.
func TestStateOfUnknownContext(t *testing.T) {
	api := newTestAPI(t, withState(t))
	for _, target := range []string{
		"/api/_events/flow/nobody/state",
		"/api/_events/flow/nobody/state?at=2025-11-05T10:00:00Z",
		"/api/_events/flow/nobody/state/diff",
		"/api/_events/trigger/nobody/state",
	} {
		rec := api.do(t, get(target))
		wantStatus(t, rec, http.StatusNotFound)
		if got := decode[errorBody](t, rec); got.Error.Code != "not_found" || !strings.Contains(got.Error.Message, "no events") {
			t.Errorf("%s: %+v, want not_found saying it has no events", target, got.Error)
		}
	}
	rec := api.do(t, get("/api/_events/flow/nobody"))
	wantStatus(t, rec, http.StatusOK)
	if b := decode[map[string]any](t, rec); b["eventCount"] != 0.0 || b["lastEventId"] != nil {
		t.Errorf("context without events: %v", b)
	}

	// Before its first event, a run that has events has its initial state.
	api.clock.Set(epoch)
	wantStatus(t, api.do(t, post("/api/_events/flow/r1", `{"kind":"flow.started","data":{"name":"f"}}`)), http.StatusCreated)
	before := url.QueryEscape(epoch.Add(-time.Second).Format(time.RFC3339))
	rec = api.do(t, get("/api/_events/flow/r1/state?at="+before))
	wantStatus(t, rec, http.StatusOK)
	if b := decode[map[string]any](t, rec); b["lastEventId"] != nil || b["at"] == nil {
		t.Errorf("state before the first event: %v", b)
	}
	wantStatus(t, api.do(t, get("/api/_events/flow/r1/state/diff?to="+before)), http.StatusOK)
	rec = api.do(t, get("/api/_events/flow/r1/state"))
	wantStatus(t, rec, http.StatusOK)
	if b := decode[map[string]any](t, rec); b["lastEventId"] == nil {
		t.Errorf("state after flow.started: %v", b)
	}
}

func TestStateBadPoints(t *testing.T) {
	api := newTestAPI(t, withState(t))
	for _, tc := range []struct{ target, field string }{
		{"/api/_events/flow/r1?at=yesterday", "at"},
		{"/api/_events/flow/r1?at=", "at"},
		{"/api/_events/flow/r1/state?at=12-x", "at"},
		{"/api/_events/flow/r1/state?at=2025-13-01T00:00:00Z", "at"},
		{"/api/_events/flow/r1/state/diff?from=soon", "from"},
		{"/api/_events/flow/r1/state/diff?to=" + url.QueryEscape("1-2-3"), "to"},
	} {
		rec := api.do(t, get(tc.target))
		wantStatus(t, rec, http.StatusBadRequest)
		if got := decode[errorBody](t, rec); got.Error.Fields[tc.field] == "" {
			t.Errorf("%s: fields %v, want %s named", tc.target, got.Error.Fields, tc.field)
		}
	}
	wantStatus(t, api.do(t, get("/api/_events/Flow/r1/state")), http.StatusBadRequest)
}
