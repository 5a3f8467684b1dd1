package handlers_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
	"github.com/nqd-dev/nqd/stream"
)

func TestRoutesDocumented(t *testing.T) {
	doc, _ := mustSpec(t)
	// The routes are walked, never called, so a nil KV store will do; the
	// engine reads its store's features.
	eng := engine.New(bolttest.Open(t, boltstore.Options{}), engine.Options{})
	routes, ok := handlers.New(handlers.Deps{Stream: fakeStreamer{}, Engine: eng, Metrics: http.NotFoundHandler(),
		KV: (*boltstore.Store)(nil)}).Routes().(chi.Routes)
	if !ok {
		t.Fatal("Routes() is not a chi router")
	}
	var inRouter []string
	err := chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		inRouter = append(inRouter, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var inSpec []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			inSpec = append(inSpec, method+" "+path)
		}
	}
	slices.Sort(inRouter)
	slices.Sort(inSpec)
	if diff := cmp.Diff(inSpec, inRouter); diff != "" {
		t.Errorf("router and openapi.yaml differ (-spec +router):\n%s", diff)
	}
}

// fakeStreamer stands in for the SSE handlers, which package stream tests.
type fakeStreamer struct{}

func (fakeStreamer) Serve(w http.ResponseWriter, _ *http.Request, _ stream.Request) error {
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func TestAppendAndRead(t *testing.T) {
	api := newTestAPI(t)

	// The v0.3 spelling, with the Node module's stepId.
	rec := api.do(t, post("/api/_events/flow/run-1",
		`{"type":"flow.start","runId":"run-1","flowName":"billing","data":{"input":{"order":7}},"id":"ignored","ts":"ignored"}`))
	wantStatus(t, rec, http.StatusCreated)
	checkGolden(t, "append_single", rec.Body.Bytes())

	rec = api.do(t, post("/api/_events/flow/run-1", `{"events":[
		{"kind":"step.started","flow":"run-1","step":"charge","meta":{"attempt":1,"jobId":"17"}},
		{"type":"log","runId":"run-1","stepName":"charge","stepId":"run-1__charge__attempt-1","attempt":1,"data":{"level":"info","message":"charging"}},
		{"kind":"step.completed","subject":"run-1","step":"charge","attempt":1,"meta":{"attempt":1},"data":{"result":{"ok":true}}}
	]}`))
	wantStatus(t, rec, http.StatusCreated)
	checkGolden(t, "append_batch", rec.Body.Bytes())

	rec = api.do(t, get("/api/_events/flow/run-1"))
	wantStatus(t, rec, http.StatusOK)
	checkGolden(t, "context", rec.Body.Bytes())

	rec = api.do(t, get("/api/_events/flow/list?name=billing"))
	wantStatus(t, rec, http.StatusOK)
	checkGolden(t, "list", rec.Body.Bytes())
}

// contextBody is what the context route answers.
type contextBody struct {
	Type        string  `json:"type"`
	ID          string  `json:"id"`
	EventCount  int64   `json:"eventCount"`
	LastEventID *string `json:"lastEventId"`
	Events      []struct {
		ID   string `json:"id"`
		Kind string `json:"kind"`
	} `json:"events"`
}

func (b contextBody) ids() []string {
	var ids []string
	for _, e := range b.Events {
		ids = append(ids, e.ID)
	}
	return ids
}

func TestGetEmptyContext(t *testing.T) {
	api := newTestAPI(t)
	rec := api.do(t, get("/api/_events/flow/never-written"))
	wantStatus(t, rec, http.StatusOK)
	got := decode[contextBody](t, rec)
	if got.EventCount != 0 || got.LastEventID != nil || got.Events == nil || len(got.Events) != 0 {
		t.Errorf("empty context = %+v, want eventCount 0, lastEventId null, events []", got)
	}
}

func TestGetContextPages(t *testing.T) {
	api := newTestAPI(t)
	var batch []string
	for i := range 5 {
		batch = append(batch, fmt.Sprintf(`{"kind":"log","data":{"n":%d}}`, i))
	}
	wantStatus(t, api.do(t, post("/api/_events/job/j1", `{"events":[`+strings.Join(batch, ",")+`]}`)), http.StatusCreated)

	all := decode[contextBody](t, api.do(t, get("/api/_events/job/j1")))
	if len(all.Events) != 5 || all.EventCount != 5 || *all.LastEventID != all.Events[4].ID {
		t.Fatalf("whole context = %+v, want 5 events ending at lastEventId", all)
	}
	page := decode[contextBody](t, api.do(t, get("/api/_events/job/j1?limit=2&fromId="+all.Events[1].ID)))
	if diff := cmp.Diff(all.ids()[2:4], page.ids()); diff != "" {
		t.Errorf("page after %s (-want +got):\n%s", all.Events[1].ID, diff)
	}
	if page.EventCount != 5 || *page.LastEventID != all.Events[4].ID {
		t.Errorf("page: eventCount %d, lastEventId %s; want the whole stream's 5, %s", page.EventCount, *page.LastEventID, all.Events[4].ID)
	}
}

// listBody is what the list route answers.
type listBody struct {
	Count int   `json:"count"`
	Total int64 `json:"total"`
	Items []struct {
		ID        string `json:"id"`
		Timestamp int64  `json:"timestamp"`
	} `json:"items"`
}

func TestListNewestFirst(t *testing.T) {
	api := newTestAPI(t)
	for i := range 120 {
		api.clock.Set(epoch.Add(timeMS(i)))
		wantStatus(t, api.do(t, post(fmt.Sprintf("/api/_events/flow/run-%03d", i),
			`{"kind":"flow.started","flowName":"bulk"}`)), http.StatusCreated)
	}

	tests := []struct {
		target    string
		wantFirst string
		wantCount int
	}{
		{"/api/_events/flow/list?name=bulk", "run-119", 50},
		{"/api/_events/flow/list?name=bulk&limit=500", "run-119", 100}, // capped
		{"/api/_events/flow/list?name=bulk&limit=10&offset=115", "run-004", 5},
		{"/api/_events/flow/list", "run-119", 50}, // the index of every flow context
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			got := decode[listBody](t, api.do(t, get(tt.target)))
			if got.Count != tt.wantCount || len(got.Items) != tt.wantCount || got.Total != 120 {
				t.Fatalf("count %d, %d items, total %d; want %d, %d, 120", got.Count, len(got.Items), got.Total, tt.wantCount, tt.wantCount)
			}
			if got.Items[0].ID != tt.wantFirst {
				t.Errorf("first item %s, want %s", got.Items[0].ID, tt.wantFirst)
			}
			for i := 1; i < len(got.Items); i++ {
				if got.Items[i].Timestamp > got.Items[i-1].Timestamp {
					t.Fatalf("items %d and %d are not newest first", i-1, i)
				}
			}
		})
	}

	got := decode[listBody](t, api.do(t, get("/api/_events/flow/list?name=other")))
	if got.Count != 0 || got.Total != 0 || got.Items == nil {
		t.Errorf("unknown index = %+v, want an empty page with items []", got)
	}
}

func TestIdempotencyKey(t *testing.T) {
	api := newTestAPI(t)

	first := api.do(t, withKey(post("/api/_events/flow/run-1", `{"kind":"flow.started"}`), "k-1"))
	wantStatus(t, first, http.StatusCreated)
	if h := first.Header().Get("Idempotent-Replayed"); h != "" {
		t.Errorf("first append: Idempotent-Replayed %q, want none", h)
	}
	api.clock.Set(epoch.Add(timeMS(10)))
	again := api.do(t, withKey(post("/api/_events/flow/run-1", `{"kind":"flow.started"}`), "k-1"))
	wantStatus(t, again, http.StatusCreated)
	if h := again.Header().Get("Idempotent-Replayed"); h != "true" {
		t.Errorf("repeat: Idempotent-Replayed %q, want true", h)
	}
	if diff := cmp.Diff(first.Body.String(), again.Body.String()); diff != "" {
		t.Errorf("repeat answered a different body (-first +repeat):\n%s", diff)
	}
	if n := decode[contextBody](t, api.do(t, get("/api/_events/flow/run-1"))).EventCount; n != 1 {
		t.Errorf("eventCount %d after a repeat, want 1", n)
	}

	// A key first used for a batch cannot answer a single event.
	wantStatus(t, api.do(t, withKey(post("/api/_events/flow/run-1", `{"events":[{"kind":"a"},{"kind":"b"}]}`), "k-2")), http.StatusCreated)
	rec := api.do(t, withKey(post("/api/_events/flow/run-1", `{"kind":"a"}`), "k-2"))
	wantStatus(t, rec, http.StatusUnprocessableEntity)
	if code := decode[errorBody](t, rec).Error.Code; code != nqd.CodeKeyReused {
		t.Errorf("code %q, want %s", code, nqd.CodeKeyReused)
	}
}

func TestBatchIsAllOrNothing(t *testing.T) {
	api := newTestAPI(t)
	rec := api.do(t, post("/api/_events/flow/run-1", `{"events":[
		{"kind":"a"},{"kind":"b"},{"kind":"c"},{"kind":"Not A Kind"},{"type":"e","kind":"f","bogus":1},{"kind":"g","meta":3}]}`))
	wantStatus(t, rec, http.StatusBadRequest)
	got := decode[errorBody](t, rec)
	want := map[string]string{
		"events[3].kind":  "must be a dot.case event kind such as step.completed",
		"events[4].bogus": "unknown field",
		"events[5].meta":  "must be an object",
	}
	if diff := cmp.Diff(want, got.Error.Fields); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
	if n := decode[contextBody](t, api.do(t, get("/api/_events/flow/run-1"))).EventCount; n != 0 {
		t.Errorf("eventCount %d after a rejected batch, want 0", n)
	}
}

func TestBadRequests(t *testing.T) {
	const ctx = "/api/_events/flow/run-1"
	tests := []struct {
		name       string
		req        request
		wantStatus int
		wantCode   string
		wantFields map[string]string // nil: the answer has none
		wantAllow  string
	}{
		{"unknown route", get("/api/nope"), 404, "not_found", nil, ""},
		// One segment after _events names a stream by its storage key.
		{"no id", get("/api/_events/flow"), 400, "validation_failed", map[string]string{"key": "must be nq:<type>:<id> with a valid type and id, or nq:events"}, ""},
		{"wrong method", request{method: http.MethodDelete, target: ctx}, 405, "method_not_allowed", nil, "GET, POST"},
		{"wrong method on healthz", post("/healthz", `{}`), 405, "method_not_allowed", nil, "GET, HEAD"},

		{"type with colon", post("/api/_events/a:b/run-1", `{"kind":"a"}`), 400, "validation_failed", map[string]string{"type": typeRule}, ""},
		{"type upper case", get("/api/_events/Flow/run-1"), 400, "validation_failed", map[string]string{"type": typeRule}, ""},
		{"plural type", get("/api/_events/flows/run-1"), 400, "validation_failed", map[string]string{"type": typeRule}, ""},
		{"reserved type", post("/api/_events/await/a1", `{"kind":"a"}`), 400, "validation_failed", map[string]string{"type": typeRule}, ""},
		{"type star on list", get("/api/_events/*/list"), 400, "validation_failed", map[string]string{"type": typeRule}, ""},
		{"id with colon", post("/api/_events/flow/a:b", `{"kind":"a"}`), 400, "validation_failed", map[string]string{"id": idRule}, ""},
		{"id star", get("/api/_events/flow/*"), 400, "validation_failed", map[string]string{"id": idRule}, ""},
		{"id with space", get("/api/_events/flow/a%20b"), 400, "validation_failed", map[string]string{"id": idRule}, ""},
		{"id of 200 characters", get("/api/_events/flow/" + strings.Repeat("a", 200)), 400, "validation_failed", map[string]string{"id": idRule}, ""},
		{"id list", post("/api/_events/flow/list", `{"kind":"a"}`), 400, "validation_failed", map[string]string{"id": idRule}, ""},

		{"missing kind", post(ctx, `{"data":{}}`), 400, "validation_failed", map[string]string{"kind": "required"}, ""},
		{"malformed kind", post(ctx, `{"kind":"Step Completed"}`), 400, "validation_failed", map[string]string{"kind": kindRule}, ""},
		{"malformed type", post(ctx, `{"type":"step..completed"}`), 400, "validation_failed", map[string]string{"kind": kindRule}, ""},
		{"kind not a string", post(ctx, `{"kind":5}`), 400, "validation_failed", map[string]string{"kind": "must be a string"}, ""},
		{"kind and type disagree", post(ctx, `{"kind":"a","type":"b"}`), 400, "validation_failed", map[string]string{"type": "must equal kind when both are sent"}, ""},
		{"flow and runId disagree", post(ctx, `{"kind":"a","flow":"r1","runId":"r2"}`), 400, "validation_failed", map[string]string{"runId": "must equal flow when both are sent"}, ""},
		{"step and stepName disagree", post(ctx, `{"kind":"a","step":"s1","stepName":"s2"}`), 400, "validation_failed", map[string]string{"stepName": "must equal step when both are sent"}, ""},
		{"attempt and meta.attempt disagree", post(ctx, `{"kind":"a","attempt":2,"meta":{"attempt":1}}`), 400, "validation_failed", map[string]string{"attempt": "must equal meta.attempt when both are sent"}, ""},
		{"stepId and meta.stepId disagree", post(ctx, `{"kind":"a","stepId":"x","meta":{"stepId":"y"}}`), 400, "validation_failed", map[string]string{"stepId": "must equal meta.stepId when both are sent"}, ""},
		{"subject not the URL id", post(ctx, `{"kind":"a","subject":"run-2"}`), 400, "validation_failed", map[string]string{"subject": "must equal the context id of the URL"}, ""},
		{"attempt negative", post(ctx, `{"kind":"a","attempt":-1}`), 400, "validation_failed", map[string]string{"attempt": "at least 0"}, ""},
		{"attempt fractional", post(ctx, `{"kind":"a","attempt":1.5}`), 400, "validation_failed", map[string]string{"attempt": "must be an integer"}, ""},
		{"meta.attempt not an integer", post(ctx, `{"kind":"a","meta":{"attempt":"2"}}`), 400, "validation_failed", map[string]string{"meta.attempt": "must be an integer"}, ""},
		{"meta not an object", post(ctx, `{"kind":"a","meta":"x"}`), 400, "validation_failed", map[string]string{"meta": "must be an object"}, ""},
		{"flowName not a key name", post(ctx, `{"kind":"a","flowName":"a:b"}`), 400, "validation_failed", map[string]string{"flowName": nameRule}, ""},
		{"unknown field", post(ctx, `{"kind":"a","color":"red"}`), 400, "validation_failed", map[string]string{"color": "unknown field"}, ""},

		{"not JSON", post(ctx, `kind=a`), 400, "bad_request", nil, ""},
		{"truncated JSON", post(ctx, `{"kind":"a"`), 400, "bad_request", nil, ""},
		{"empty body", request{method: http.MethodPost, target: ctx}, 400, "bad_request", nil, ""},
		{"two JSON values", post(ctx, `{"kind":"a"}{"kind":"b"}`), 400, "bad_request", nil, ""},
		{"array body", post(ctx, `[{"kind":"a"}]`), 400, "bad_request", nil, ""},
		{"form content type", request{method: http.MethodPost, target: ctx, body: `{"kind":"a"}`, header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}}, 415, "unsupported_media_type", nil, ""},
		{"body over the limit", post(ctx, `{"kind":"a","data":"`+strings.Repeat("x", handlers.DefaultMaxBodyBytes)+`"}`), 413, "too_large", nil, ""},

		{"batch with other fields", post(ctx, `{"kind":"a","events":[{"kind":"b"}]}`), 400, "bad_request", nil, ""},
		{"empty batch", post(ctx, `{"events":[]}`), 400, "validation_failed", map[string]string{"events": "must hold at least 1 event"}, ""},
		{"batch too long", post(ctx, `{"events":[`+strings.Repeat(`{"kind":"a"},`, handlers.DefaultMaxBatch)+`{"kind":"a"}]}`), 400, "validation_failed", map[string]string{"events": "must hold at most 1000 events"}, ""},
		{"batch of a number", post(ctx, `{"events":[{"kind":"a"},7]}`), 400, "validation_failed", map[string]string{"events[1]": "must be an object"}, ""},
		{"events not an array", post(ctx, `{"events":{"kind":"a"}}`), 400, "validation_failed", map[string]string{"events": "must be an array"}, ""},

		{"idempotency key too long", request{method: http.MethodPost, target: ctx, body: `{"kind":"a"}`, header: http.Header{"Idempotency-Key": {strings.Repeat("k", 256)}}}, 400, "validation_failed", map[string]string{"Idempotency-Key": keyRule}, ""},
		{"idempotency key empty", request{method: http.MethodPost, target: ctx, body: `{"kind":"a"}`, header: http.Header{"Idempotency-Key": {""}}}, 400, "validation_failed", map[string]string{"Idempotency-Key": keyRule}, ""},
		{"idempotency key not ASCII", request{method: http.MethodPost, target: ctx, body: `{"kind":"a"}`, header: http.Header{"Idempotency-Key": {"clé"}}}, 400, "validation_failed", map[string]string{"Idempotency-Key": keyRule}, ""},

		{"limit not a number", get(ctx + "?limit=ten"), 400, "validation_failed", map[string]string{"limit": "must be an integer"}, ""},
		{"limit zero", get(ctx + "?limit=0"), 400, "validation_failed", map[string]string{"limit": "must be at least 1"}, ""},
		{"fromId not an id", get(ctx + "?fromId=abc"), 400, "validation_failed", map[string]string{"fromId": "must be a stream entry id such as 1732000000000-0"}, ""},
		{"list limit not a number", get("/api/_events/flow/list?limit=x"), 400, "validation_failed", map[string]string{"limit": "must be an integer"}, ""},
		{"list offset negative", get("/api/_events/flow/list?offset=-1"), 400, "validation_failed", map[string]string{"offset": "must be at least 0"}, ""},
		{"list name with colon", get("/api/_events/flow/list?name=a:b"), 400, "validation_failed", map[string]string{"name": nameRule}, ""},
		{"list by status", get("/api/_events/flow/list?status=running"), 400, "validation_failed", map[string]string{"status": "needs type flow, a name and the flow engine"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newTestAPI(t)
			rec := api.do(t, tt.req)
			wantStatus(t, rec, tt.wantStatus)
			got := decode[errorBody](t, rec)
			if got.Error.Code != tt.wantCode || got.Error.Message == "" {
				t.Errorf("error %+v, want code %q and a message", got.Error, tt.wantCode)
			}
			if diff := cmp.Diff(tt.wantFields, got.Error.Fields); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
			if allow := rec.Header().Get("Allow"); allow != tt.wantAllow {
				t.Errorf("Allow %q, want %q", allow, tt.wantAllow)
			}
			if n := decode[contextBody](t, api.do(t, get("/api/_events/flow/run-1"))).EventCount; n != 0 {
				t.Errorf("eventCount %d after a rejected request, want 0", n)
			}
		})
	}
}

const (
	typeRule = "must match ^[a-z][a-z0-9_-]{0,31}$, be singular (not end in s) and not be reserved by nqd"
	idRule   = "must match ^[A-Za-z0-9][A-Za-z0-9._~-]{0,127}$ and not be list"
	nameRule = "must match ^[A-Za-z0-9][A-Za-z0-9._~-]{0,127}$"
	kindRule = "must be a dot.case event kind such as step.completed"
	keyRule  = "must be 1 to 255 printable ASCII characters"
)

func TestHealth(t *testing.T) {
	api := newTestAPI(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		rec := api.do(t, get(path))
		wantStatus(t, rec, http.StatusOK)
		if diff := cmp.Diff(`{"status":"ok"}`+"\n", rec.Body.String()); diff != "" {
			t.Errorf("%s body (-want +got):\n%s", path, diff)
		}
	}
}

// TestRedisBackend runs the API's main paths on Redis, which assigns ids by
// its own clock, so the answers are checked by shape and order, not golden.
func TestRedisBackend(t *testing.T) {
	api := newRedisTestAPI(t)
	first := api.do(t, post("/api/_events/flow/run-1", `{"type":"flow.start","runId":"run-1","flowName":"billing"}`))
	wantStatus(t, first, http.StatusCreated)
	wantStatus(t, api.do(t, post("/api/_events/flow/run-1", `{"events":[{"kind":"step.started","step":"a","attempt":1},{"kind":"step.completed","step":"a"}]}`)), http.StatusCreated)

	got := decode[contextBody](t, api.do(t, get("/api/_events/flow/run-1")))
	if got.EventCount != 3 || len(got.Events) != 3 || *got.LastEventID != got.Events[2].ID {
		t.Fatalf("context = %+v, want 3 events ending at lastEventId", got)
	}
	kinds := []string{got.Events[0].Kind, got.Events[1].Kind, got.Events[2].Kind}
	if diff := cmp.Diff([]string{"flow.start", "step.started", "step.completed"}, kinds); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
	if id := decode[struct{ ID string }](t, first).ID; id != got.Events[0].ID {
		t.Errorf("append answered id %s, read gives %s", id, got.Events[0].ID)
	}

	list := decode[listBody](t, api.do(t, get("/api/_events/flow/list?name=billing")))
	if list.Total != 1 || len(list.Items) != 1 || list.Items[0].ID != "run-1" {
		t.Errorf("list = %+v, want run-1 alone", list)
	}
	empty := decode[contextBody](t, api.do(t, get("/api/_events/flow/none")))
	if empty.EventCount != 0 || empty.LastEventID != nil || len(empty.Events) != 0 {
		t.Errorf("empty context = %+v", empty)
	}
	wantStatus(t, api.do(t, get("/readyz")), http.StatusOK)
}
