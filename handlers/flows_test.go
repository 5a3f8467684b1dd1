package handlers_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
)

func newFlowServer(t *testing.T) *httptest.Server {
	t.Helper()
	st := bolttest.Open(t, boltstore.Options{})
	log := testkit.Logger(t)
	api := handlers.New(handlers.Deps{Store: st, Engine: engine.New(st, engine.Options{Logger: log}), Log: log})
	srv := httptest.NewServer(api.Routes())
	t.Cleanup(srv.Close)
	return srv
}

func call(t *testing.T, srv *httptest.Server, method, path, contentType, body string, out any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return res.StatusCode
}

const twoSteps = `
entry: a
steps:
  a: {queue: q1, emits: [a.done]}
  b: {queue: q1, subscribes: [a.done]}
`

func TestFlowDefinitionsHTTP(t *testing.T) {
	srv := newFlowServer(t)
	var errBody struct {
		Error struct {
			Code   string
			Fields map[string]string
		}
	}
	bad := `{"entry":"a","steps":{"a":{"queue":"q"},"b":{"queue":"q","subscribes":["nope"]}}}`
	if code := call(t, srv, "PUT", "/api/_flows/f1", "application/json", bad, &errBody); code != 422 || errBody.Error.Fields["steps.b.subscribes[0]"] == "" {
		t.Errorf("bad definition: %d %+v", code, errBody)
	}
	if code := call(t, srv, "PUT", "/api/_flows/f1", "application/json", `{"entry":`, nil); code != 400 {
		t.Errorf("broken JSON: %d, want 400", code)
	}
	if code := call(t, srv, "PUT", "/api/_flows/f1", "application/yaml", twoSteps, nil); code != 200 {
		t.Fatalf("PUT yaml: %d", code)
	}
	var list []map[string]any
	if code := call(t, srv, "GET", "/api/_flows", "", "", &list); code != 200 || len(list) != 1 || list[0]["id"] != "f1" {
		t.Errorf("GET /api/_flows: %d %v", code, list)
	}
	var diagram struct{ Edges []map[string]any }
	if code := call(t, srv, "GET", "/api/_flows/f1/diagram", "", "", &diagram); code != 200 || len(diagram.Edges) != 1 {
		t.Errorf("diagram: %d %+v", code, diagram)
	}
	var missing errorBody
	if code := call(t, srv, "POST", "/api/_flows/nope/start", "", "", &missing); code != 404 || !strings.Contains(missing.Error.Message, `"nope"`) {
		t.Errorf("start of unknown flow: %d %+v, want 404 naming the flow", code, missing.Error)
	}
}

func TestWorkerProtocolHTTP(t *testing.T) {
	srv := newFlowServer(t)
	if code := call(t, srv, "PUT", "/api/_flows/f1", "application/yaml", twoSteps, nil); code != 200 {
		t.Fatalf("PUT: %d", code)
	}
	var started struct{ ID, Queue, Step, FlowID string }
	if code := call(t, srv, "POST", "/api/_flows/f1/start", "application/json", `{"n":1}`, &started); code != 200 || started.Step != "a" {
		t.Fatalf("start: %d %+v", code, started)
	}
	type claimed struct {
		Jobs []struct {
			ID, Queue, Step, Lease string
			Input                  json.RawMessage
			Attempt                int
		}
	}
	run := func(step, emit string) {
		t.Helper()
		var c claimed
		if code := call(t, srv, "POST", "/api/_workers/claim", "application/json", `{"queues":["q1"],"waitMs":2000}`, &c); code != 200 || len(c.Jobs) != 1 || c.Jobs[0].Step != step {
			t.Fatalf("claim %s: %d %+v", step, code, c)
		}
		j := c.Jobs[0]
		base := "/api/_workers/jobs/" + j.Queue + "/" + j.ID
		if code := call(t, srv, "POST", base+"/heartbeat", "application/json", `{"lease":"`+j.Lease+`"}`, nil); code != 200 {
			t.Errorf("heartbeat: %d", code)
		}
		if code := call(t, srv, "POST", base+"/complete", "application/json", `{"lease":"wrong"}`, nil); code != 409 {
			t.Errorf("complete with a wrong lease: %d, want 409", code)
		}
		if code := call(t, srv, "POST", base+"/events", "application/json", `{"lease":"`+j.Lease+`","events":[{"kind":"flow.completed"}]}`, nil); code != 400 {
			t.Errorf("lifecycle event reported: %d, want 400", code)
		}
		evs := `{"kind":"step.started"}`
		if emit != "" {
			evs += `,{"kind":"emit","data":{"event":"` + emit + `","payload":{"x":1}}}`
		}
		if code := call(t, srv, "POST", base+"/events", "application/json", `{"lease":"`+j.Lease+`","events":[`+evs+`]}`, nil); code != 200 {
			t.Errorf("events: %d", code)
		}
		if code := call(t, srv, "POST", base+"/complete", "application/json", `{"lease":"`+j.Lease+`","result":{"ok":true}}`, nil); code != 200 {
			t.Errorf("complete: %d", code)
		}
		if step == "b" && string(j.Input) != `{"a.done":{"x":1}}` {
			t.Errorf("b's input = %s", j.Input)
		}
	}
	run("a", "a.done")
	run("b", "")
	var runs struct {
		Total int
		Items []struct{ ID, Status string }
	}
	if code := call(t, srv, "GET", "/api/_flows/f1/runs?status=completed", "", "", &runs); code != 200 || runs.Total != 1 || runs.Items[0].ID != started.FlowID {
		t.Errorf("completed runs: %d %+v", code, runs)
	}
	// The runs page spells a cancelled run as the Nuxt Queue UIs do, and
	// takes that spelling as a filter.
	var second struct{ FlowID string }
	if code := call(t, srv, "POST", "/api/_flows/f1/start", "application/json", `{}`, &second); code != 200 {
		t.Fatalf("second start: %d", code)
	}
	if code := call(t, srv, "POST", "/api/_flows/f1/runs/"+second.FlowID+"/cancel", "", "", nil); code != 200 {
		t.Fatalf("cancel: %d", code)
	}
	for _, status := range []string{"canceled", "cancelled"} {
		if code := call(t, srv, "GET", "/api/_flows/f1/runs?status="+status, "", "", &runs); code != 200 || runs.Total != 1 ||
			runs.Items[0].ID != second.FlowID || runs.Items[0].Status != "canceled" {
			t.Errorf("runs?status=%s: %d %+v, want the second run, canceled", status, code, runs)
		}
	}
	var list struct{ Total int }
	if code := call(t, srv, "GET", "/api/_events/flow/list?name=f1&status=running", "", "", &list); code != 200 || list.Total != 0 {
		t.Errorf("running list: %d %+v", code, list)
	}
	if code := call(t, srv, "POST", "/api/_workers/jobs/q1/bad/fail", "application/json", `{"lease":"x","error":"e"}`, nil); code != 400 {
		t.Errorf("bad job id: %d, want 400", code)
	}
	if code := call(t, srv, "POST", "/api/_workers/claim", "application/json", `{"queues":[]}`, nil); code != 400 {
		t.Errorf("claim without queues: %d, want 400", code)
	}
}
