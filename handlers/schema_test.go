package handlers_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/handlers"
)

// TestSchemaKeywordsNotEnforcedAreRefused: a flow whose trigger or state
// schema says something nqd would not check is refused when stored, each
// such keyword named by its path.
func TestSchemaKeywordsNotEnforcedAreRefused(t *testing.T) {
	api := newTestAPI(t, func(d *handlers.Deps) { d.Engine = engine.New(d.Store.(engine.Store), engine.Options{Logger: d.Log}) })
	body := `{"entry":"a","steps":{"a":{"queue":"q1","emits":["a.done"]},
		"b":{"queue":"q1","subscribes":["a.done"],"await":{"type":"trigger","schema":{
			"type":"object","nullable":true,
			"properties":{"approved":{"const":true},"phone":{"type":"string","format":"phone"},"who":{"$ref":"https://example.com/who.json"}}}}}},
		"stateSchema":{"type":"object","properties":{"n":{"type":"integer","example":3}}}}`
	rec := api.do(t, request{method: http.MethodPut, target: "/api/_flows/demo", body: body})
	wantStatus(t, rec, http.StatusUnprocessableEntity)
	got := decode[errorBody](t, rec).Error.Fields
	for _, path := range []string{
		"steps.b.await.schema.nullable",
		"steps.b.await.schema.properties.phone.format",
		"steps.b.await.schema.properties.who.$ref",
		"stateSchema.properties.n.example",
	} {
		if got[path] == "" {
			t.Errorf("no refusal of %s in %v", path, got)
		}
	}
	if len(got) != 4 {
		t.Errorf("fields %v, want exactly the four keywords", got)
	}
	wantStatus(t, api.do(t, get("/api/_flows/demo")), http.StatusNotFound)
}

// TestTriggerPayloadSchema: a payload that breaks the trigger's JSON Schema
// 2020-12 gets one line per failing place and fires nothing; one that meets
// it fires the trigger.
func TestTriggerPayloadSchema(t *testing.T) {
	for _, backend := range []string{"bolt", "redis"} {
		t.Run(backend, func(t *testing.T) {
			api, e, st := newAwaitAPI(t, backend)
			d, err := e.Definition(t.Context(), "approve")
			if err != nil {
				t.Fatal(err)
			}
			wait := d.Steps["wait"]
			wait.Await = &flows.Await{Type: "trigger", Timeout: 60_000, Schema: json.RawMessage(`{
				"type":"object","required":["approved","by"],
				"properties":{"approved":{"const":true},"by":{"type":"string","minLength":2},"tags":{"type":"array","items":{"type":"string"}}}}`)}
			d.Steps["wait"] = wait
			if err := e.PutDefinition(t.Context(), d); err != nil {
				t.Fatal(err)
			}
			_, id := awaitingRun(t, e, st)

			rec := api.do(t, post("/api/_flows/triggers/"+id, `{"approved":false,"by":"x","tags":["ok",7]}`))
			wantStatus(t, rec, http.StatusUnprocessableEntity)
			fields := decode[errorBody](t, rec).Error.Fields
			for _, path := range []string{"payload.approved", "payload.by", "payload.tags[1]"} {
				if fields[path] == "" || strings.Contains(fields[path], "\n") {
					t.Errorf("%s: %q, want one line", path, fields[path])
				}
			}
			if len(fields) != 3 {
				t.Errorf("fields %v, want the three failing places", fields)
			}
			rec = api.do(t, post("/api/_flows/triggers/"+id, `{"by":"ops"}`))
			wantStatus(t, rec, http.StatusUnprocessableEntity)
			if f := decode[errorBody](t, rec).Error.Fields; f["payload"] == "" || len(f) != 1 {
				t.Errorf("missing property: %v, want it named at payload", f)
			}

			rec = api.do(t, post("/api/_flows/triggers/"+id, `{"approved":true,"by":"ops","tags":["a"]}`))
			wantStatus(t, rec, http.StatusOK)
			if out := decode[struct{ Replayed bool }](t, rec); out.Replayed {
				t.Error("the first accepted payload was answered as a replay: a refused one fired")
			}
		})
	}
}
