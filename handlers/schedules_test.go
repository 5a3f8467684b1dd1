package handlers_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/scheduler"
)

// withScheduler stores the test flows and gives the API a scheduler, kept
// in step with the API's trigger registry when it has one.
func withScheduler(t *testing.T) func(*handlers.Deps) {
	return func(d *handlers.Deps) {
		defs, err := flows.LoadDir("../flows/testdata")
		if err != nil {
			t.Fatal(err)
		}
		for _, def := range defs {
			if err := d.Engine.PutDefinition(t.Context(), def); err != nil {
				t.Fatal(err)
			}
		}
		opts := scheduler.Options{Logger: testkit.Logger(t)}
		if d.Triggers != nil {
			opts.Registry = d.Triggers
		}
		d.Scheduler = scheduler.New(d.Engine, d.Store.(scheduler.Store), opts)
	}
}

func TestFlowSchedules(t *testing.T) {
	api := newTestAPI(t, withScheduler(t))
	for body, field := range map[string]string{
		`{"cron":"61 * * * *"}`:                          "cron",
		`{"cron":"0 2 * * *","timezone":"Mars/Olympus"}`: "timezone",
		`{"cron":"0 2 * * *","overlap":"queue"}`:         "overlap",
		`{"delay":-5}`:                                   "delay",
	} {
		rec := api.do(t, request{method: http.MethodPost, target: "/api/_flows/example-flow/schedule", body: body})
		var e struct {
			Error struct {
				Fields map[string]string `json:"fields"`
			} `json:"error"`
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &e)
		if rec.Code != http.StatusBadRequest || e.Error.Fields[field] == "" {
			t.Errorf("POST %s: %d %s, want a 400 naming %s", body, rec.Code, rec.Body, field)
		}
	}
	if rec := api.do(t, request{method: http.MethodPost, target: "/api/_flows/nope/schedule", body: `{"cron":"@daily"}`}); rec.Code != http.StatusNotFound {
		t.Errorf("schedule of no flow: %d", rec.Code)
	}
	rec := api.do(t, request{method: http.MethodPost, target: "/api/_flows/example-flow/schedule",
		body: `{"cron":"0 2 * * *","timezone":"Europe/Berlin","jobId":"nightly","input":{"a":1}}`})
	if rec.Code != http.StatusOK {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	var list []struct {
		ID      string `json:"id"`
		Step    string `json:"step"`
		NextRun string `json:"nextRun"`
	}
	rec = api.do(t, request{method: http.MethodGet, target: "/api/_flows/example-flow/schedules"})
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || len(list) != 1 || list[0].ID != "nightly" || list[0].Step != "fetch_data" || list[0].NextRun == "" {
		t.Fatalf("list: %s", rec.Body)
	}
	var preview struct {
		NextRuns []string `json:"nextRuns"`
	}
	rec = api.do(t, request{method: http.MethodGet, target: "/api/_scheduler/jobs/schedule:nightly/preview?count=3"})
	if err := json.Unmarshal(rec.Body.Bytes(), &preview); err != nil || len(preview.NextRuns) != 3 || preview.NextRuns[0] != list[0].NextRun {
		t.Fatalf("preview: %s", rec.Body)
	}
	if rec := api.do(t, request{method: http.MethodPost, target: "/api/_scheduler/jobs/schedule:nightly/fire"}); rec.Code != http.StatusOK {
		t.Fatalf("fire: %d %s", rec.Code, rec.Body)
	}
	var paused struct {
		Paused  bool   `json:"paused"`
		NextRun string `json:"nextRun"`
	}
	rec = api.do(t, request{method: http.MethodPost, target: "/api/_scheduler/jobs/schedule:nightly/pause"})
	if err := json.Unmarshal(rec.Body.Bytes(), &paused); err != nil || !paused.Paused || paused.NextRun != "" {
		t.Fatalf("pause: %d %s", rec.Code, rec.Body)
	}
	rec = api.do(t, request{method: http.MethodPost, target: "/api/_scheduler/jobs/schedule:nightly/resume"})
	if err := json.Unmarshal(rec.Body.Bytes(), &paused); err != nil || paused.Paused || paused.NextRun != list[0].NextRun {
		t.Fatalf("resume: %d %s", rec.Code, rec.Body)
	}
	if rec := api.do(t, request{method: http.MethodPost, target: "/api/_scheduler/jobs/trigger:nightly/pause"}); rec.Code != http.StatusConflict {
		t.Errorf("pause of a trigger's schedule: %d", rec.Code)
	}
	if rec := api.do(t, request{method: http.MethodGet, target: "/api/_scheduler/jobs/bogus/preview"}); rec.Code != http.StatusBadRequest {
		t.Errorf("preview of a bad id: %d", rec.Code)
	}
	if rec := api.do(t, request{method: http.MethodDelete, target: "/api/_flows/example-flow/schedules/nightly"}); rec.Code != http.StatusOK {
		t.Fatalf("delete: %d %s", rec.Code, rec.Body)
	}
	if rec := api.do(t, request{method: http.MethodDelete, target: "/api/_flows/example-flow/schedules/nightly"}); rec.Code != http.StatusNotFound {
		t.Errorf("second delete: %d", rec.Code)
	}
	rec = api.do(t, request{method: http.MethodGet, target: "/api/_flows/example-flow/schedules"})
	if rec.Body.String() != "[]\n" {
		t.Errorf("list after delete: %q", rec.Body)
	}
}

// The scheduler page takes a schedule trigger's next and last run and its
// counts from the schedule's state, and lists the v0.4 flow schedules too.
func TestSchedulerJobsCarryScheduleState(t *testing.T) {
	var sch *scheduler.Scheduler
	api := newTriggerAPI(t, "bolt", withScheduler(t), func(d *handlers.Deps) { sch = d.Scheduler })
	wantStatus(t, api.do(t, post("/api/_triggers", `{"name":"hourly","type":"schedule","config":{"cron":"0 * * * *","timezone":"Europe/Berlin"},"subscriptions":["example-flow"]}`)), http.StatusOK)
	if err := sch.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, api.do(t, post("/api/_flows/example-flow/schedule", `{"cron":"0 2 * * *","jobId":"nightly"}`)), http.StatusOK)
	wantStatus(t, api.do(t, post("/api/_scheduler/jobs/trigger:hourly/fire", ``)), http.StatusOK)
	var page struct {
		Jobs []struct {
			ID       string `json:"id"`
			NextRun  int64  `json:"nextRun"`
			LastRun  int64  `json:"lastRun"`
			RunCount int64  `json:"runCount"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(api.do(t, get("/api/_scheduler/jobs")).Body.Bytes(), &page); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, j := range page.Jobs {
		if j.NextRun <= 0 {
			t.Errorf("job %s has no nextRun", j.ID)
		}
		got[j.ID] = j.RunCount
	}
	if len(got) != 2 || got["trigger:hourly"] != 1 || got["schedule:nightly"] != 0 {
		t.Errorf("jobs %+v, want trigger:hourly fired once and schedule:nightly", page.Jobs)
	}
}

// A delay schedules one run, as v0.4's delayed job did: the schedule fires
// once, its due time rounded to a whole second.
func TestFlowScheduleDelay(t *testing.T) {
	api := newTestAPI(t, withScheduler(t))
	rec := api.do(t, request{method: http.MethodPost, target: "/api/_flows/example-flow/schedule", body: `{"delay":1500,"jobId":"later"}`})
	var created struct {
		Schedule map[string]any `json:"schedule"`
		NextRun  string         `json:"nextRun"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &created); err != nil || rec.Code != http.StatusOK || created.Schedule["delay"] != float64(2000) || created.NextRun == "" {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	rec = api.do(t, request{method: http.MethodGet, target: "/api/_flows/example-flow/schedules"})
	var list []struct{ ID string }
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || len(list) != 1 || list[0].ID != "later" {
		t.Fatalf("list: %s", rec.Body)
	}
}
