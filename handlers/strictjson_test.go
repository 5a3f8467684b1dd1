package handlers_test

import (
	"net/http"
	"testing"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/store"
)

func TestStrictJSON(t *testing.T) {
	onBothStores(t, func(t *testing.T, newAPI func(...func(*handlers.Deps)) *testAPI) {
		api := newAPI(func(d *handlers.Deps) { d.Engine = engine.New(d.Store.(engine.Store), engine.Options{Logger: d.Log}) })
		wantStatus(t, api.do(t, request{method: http.MethodPut, target: "/api/_flows/demo", body: `{"entry":"a","steps":{"a":{"queue":"q1"}}}`}), http.StatusOK)
		const target = "/api/_events/flow/run-1"
		for _, tt := range []struct {
			name, target, body, field string
		}{
			{"invalid UTF-8 in data", target, "{\"kind\":\"x.y\",\"data\":{\"s\":\"\xff\xfe\"}}", "data.s"},
			{"invalid UTF-8 in a name", target, "{\"kind\":\"x.y\",\"data\":{\"\xc3\":1}}", "data"},
			{"a lone surrogate", target, `{"kind":"x.y","data":{"s":"\ud800"}}`, "data.s"},
			{"a duplicate kind", target, `{"kind":"a.b","kind":"c.d"}`, "kind"},
			{"a duplicate deep in a batch", target, `{"events":[{"kind":"a.b"},{"kind":"a.b","data":{"x":{"y":1,"y":2}}}]}`, "events[1].data.x.y"},
			{"a duplicate in a run's input", "/api/_flows/demo/start", `{"n":1,"n":2}`, "n"},
			{"a duplicate in a flow definition", "/api/_flows/demo", `{"entry":"a","entry":"b","steps":{"a":{"queue":"q1"}}}`, "entry"},
			{"invalid UTF-8 in a trigger payload", "/api/_flows/triggers/tg1.x.y", "{\"ok\":\"\xff\"}", "payload.ok"},
		} {
			method := http.MethodPost
			if tt.target == "/api/_flows/demo" {
				method = http.MethodPut
			}
			rec := api.do(t, request{method: method, target: tt.target, body: tt.body})
			wantStatus(t, rec, http.StatusBadRequest)
			got := decode[errorBody](t, rec).Error
			if got.Code != nqd.CodeValidation || got.Fields[tt.field] == "" || len(got.Fields) != 1 {
				t.Errorf("%s: %+v, want validation_failed naming %s", tt.name, got, tt.field)
			}
		}
		if n := api.length(t, store.Context{Type: "flow", ID: "run-1"}); n != 0 {
			t.Errorf("stored %d events from refused bodies", n)
		}
		runs := decode[struct{ Total int }](t, api.do(t, get("/api/_flows/demo/runs")))
		if runs.Total != 0 {
			t.Errorf("refused starts left %d runs", runs.Total)
		}
		// Escaped, valid text is fine, and reads back as sent.
		wantStatus(t, api.do(t, post(target, `{"kind":"x.y","data":{"s":"\u00e9\ud83d\ude00 é"}}`)), http.StatusCreated)
	})
}
