package handlers_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/internal/pgtest"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
	"github.com/nqd-dev/nqd/triggers"
)

// countedRefusals records the webhook refusals the API counts.
type countedRefusals struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *countedRefusals) WebhookRefused(webhook, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[webhook+"/"+reason]++
}

func (c *countedRefusals) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// triggerAPI is the real router with a trigger registry on a store of one
// backend.
type triggerAPI struct {
	*testAPI
	eng      *engine.Engine
	reg      *triggers.Registry
	refusals *countedRefusals
}

var triggerBackends = []string{"bolt", "redis", "postgres"}

func newTriggerAPI(t *testing.T, backend string, opts ...func(*handlers.Deps)) triggerAPI {
	t.Helper()
	return triggerAPIOn(t, openTriggerStore(t, backend, ""), opts...)
}

// openTriggerStore opens a store of backend; on Redis and PostgreSQL, two
// opened with the same shared (a key prefix, a URL) are two instances on
// one server, and an empty shared is a place of the test's own.
func openTriggerStore(t *testing.T, backend, shared string) engine.Store {
	t.Helper()
	log := testkit.Logger(t)
	switch backend {
	case "redis":
		return backendtest.OpenRedis(t, shared)
	case "postgres":
		return backendtest.OpenPostgres(t, shared)
	}
	return bolttest.Open(t, boltstore.Options{Logger: log})
}

// triggerAPIOn builds the API with a trigger registry on st.
func triggerAPIOn(t *testing.T, st engine.Store, opts ...func(*handlers.Deps)) triggerAPI {
	t.Helper()
	log := testkit.Logger(t)
	states := newStates(t, st)
	eng := engine.New(st, engine.Options{Logger: log})
	refusals := &countedRefusals{n: map[string]int{}}
	reg := triggers.New(st, states, eng, triggers.Options{Logger: log})
	deps := handlers.Deps{Store: st, State: states, Engine: eng, Log: log, Triggers: reg, WebhookRefusals: refusals}
	for _, opt := range opts {
		opt(&deps)
	}
	return triggerAPI{testAPI: &testAPI{h: handlers.New(deps).Routes(), store: st}, eng: eng, reg: reg, refusals: refusals}
}

func (a triggerAPI) define(t *testing.T, name, body string) {
	t.Helper()
	d, err := flows.Parse([]byte(body), false, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.eng.PutDefinition(t.Context(), d); err != nil {
		t.Fatal(err)
	}
}

func jsonRequest(method, target, body string, header ...string) request {
	r := request{method: method, target: target, body: body, header: http.Header{}}
	for i := 0; i+1 < len(header); i += 2 {
		r.header.Set(header[i], header[i+1])
	}
	return r
}

// refusal is the {error, statusCode} the mutations answer in a 200.
type refusal struct {
	Error      string `json:"error"`
	StatusCode int    `json:"statusCode"`
}

func wantRefusal(t *testing.T, rec interface {
	Result() *http.Response
}, body []byte, status int) {
	t.Helper()
	if code := rec.Result().StatusCode; code != http.StatusOK {
		t.Fatalf("status %d, want 200 with the refusal in the body: %s", code, body)
	}
	var r refusal
	if err := json.Unmarshal(body, &r); err != nil || r.Error == "" || r.StatusCode != status {
		t.Fatalf("body %s, want {error, statusCode: %d}", body, status)
	}
}

func TestTriggerRoutesRoundTrip(t *testing.T) {
	for _, backend := range triggerBackends {
		t.Run(backend, func(t *testing.T) {
			api := newTriggerAPI(t, backend)
			rec := api.do(t, post("/api/_triggers", `{"name":"orders","type":"webhook","displayName":"Orders","description":"","scope":"flow","status":"active",
				"config":{"path":"/orders","method":"POST","requireAuth":true,"authHeader":"X-Hook-Key"},"subscriptions":["f"]}`))
			wantStatus(t, rec, http.StatusOK)
			created := decode[struct {
				Success bool `json:"success"`
				Trigger struct {
					Name          string   `json:"name"`
					Status        string   `json:"status"`
					Subscriptions []string `json:"subscriptions"`
					CreatedAt     string   `json:"createdAt"`
					Secret        string   `json:"secret"`
				} `json:"trigger"`
			}](t, rec)
			if !created.Success || created.Trigger.Status != "active" || created.Trigger.CreatedAt == "" ||
				len(created.Trigger.Subscriptions) != 1 || created.Trigger.Secret == "" {
				t.Fatalf("created %s", rec.Body)
			}

			list := decode[[]triggers.Trigger](t, api.do(t, get("/api/_triggers?_t=1")))
			if len(list) != 1 || list[0].Name != "orders" || list[0].SubscriptionCount != 1 || list[0].Stats.SuccessRate != 100 {
				t.Fatalf("listed %+v", list)
			}
			one := decode[triggers.Trigger](t, api.do(t, get("/api/_triggers/orders")))
			if one.Webhook == nil || one.Webhook.FullURL != "http://example.com/api/_webhook/trigger/orders" || one.Webhook.Auth.Header != "X-Hook-Key" {
				t.Errorf("webhook %+v", one.Webhook)
			}
			if strings.Contains(api.do(t, get("/api/_triggers/orders")).Body.String(), created.Trigger.Secret) {
				t.Error("the secret is answered by GET")
			}

			rec = api.do(t, jsonRequest(http.MethodPatch, "/api/_triggers/orders", `{"displayName":"All orders","status":"inactive","subscriptions":["f","g"],"config":{"method":"PUT"}}`))
			wantStatus(t, rec, http.StatusOK)
			one = decode[triggers.Trigger](t, api.do(t, get("/api/_triggers/orders")))
			if one.DisplayName != "All orders" || one.Status != "inactive" || one.SubscriptionCount != 2 || one.Webhook.Method != "PUT" {
				t.Errorf("after PATCH %+v", one)
			}

			stats := decode[triggers.Summary](t, api.do(t, get("/api/_triggers/stats")))
			if stats.Total != 1 || stats.Inactive != 1 || stats.ByType["webhook"] != 1 || stats.TotalSubscriptions != 2 || stats.WithSubscribers != 1 {
				t.Errorf("stats %+v", stats)
			}

			page := decode[triggers.EventPage](t, api.do(t, get("/api/_triggers/orders/events?limit=2&offset=0&_t=3")))
			if page.Count != 2 || page.Total != 4 || !page.HasMore || page.Events[0].Type != "subscription.added" || page.Events[1].Type != "trigger.updated" {
				t.Errorf("events %+v", page)
			}
			if page.Events[0].TS < page.Events[1].TS || page.Events[1].TS <= 0 {
				t.Errorf("ts not newest first in epoch ms: %+v", page.Events)
			}
			typed := decode[triggers.EventPage](t, api.do(t, get("/api/_triggers/orders/events?types=trigger.registered,trigger.updated")))
			if typed.Total != 2 || typed.Events[1].Type != "trigger.registered" {
				t.Errorf("typed events %+v", typed)
			}

			rec = api.do(t, jsonRequest(http.MethodDelete, "/api/_triggers/orders", ""))
			wantStatus(t, rec, http.StatusOK)
			if !strings.Contains(rec.Body.String(), `"success":true`) {
				t.Errorf("delete answered %s", rec.Body)
			}
			wantStatus(t, api.do(t, get("/api/_triggers/orders")), http.StatusNotFound)
			wantStatus(t, api.do(t, get("/api/_triggers/orders/events")), http.StatusNotFound)
			if list := decode[[]triggers.Trigger](t, api.do(t, get("/api/_triggers"))); len(list) != 0 {
				t.Errorf("listed %+v after delete", list)
			}
		})
	}
}

func TestTriggerRefusalsStoreNothing(t *testing.T) {
	for _, backend := range triggerBackends {
		t.Run(backend, func(t *testing.T) {
			api := newTriggerAPI(t, backend)
			for _, tc := range []struct {
				body   string
				status int
			}{
				{`{"type":"manual"}`, 400},
				{`{"name":"bad name","type":"manual"}`, 400},
				{`{"name":"stats","type":"manual"}`, 400},
				{`{"name":"t","type":"cron"}`, 400},
				{`{"name":"t","type":"event","config":{}}`, 400},
				{`{"name":"t","type":"schedule","config":{"cron":"61 * * * *"}}`, 400},
				{`{"name":"t","type":"manual","colour":"red"}`, 400},
				{`{"name":"t","type":"manual",`, 400},
			} {
				rec := api.do(t, post("/api/_triggers", tc.body))
				wantRefusal(t, rec, rec.Body.Bytes(), tc.status)
			}
			if body := api.do(t, get("/api/_triggers")).Body.String(); strings.TrimSpace(body) != "[]" {
				t.Errorf("listed %s after refused creates", body)
			}
			wantStatus(t, api.do(t, get("/api/_triggers/t/events")), http.StatusNotFound)

			wantStatus(t, api.do(t, post("/api/_triggers", `{"name":"t","type":"event","config":{"event":"order.created","filter":{"region":"eu"}}}`)), http.StatusOK)
			rec := api.do(t, post("/api/_triggers", `{"name":"t","type":"manual"}`))
			wantRefusal(t, rec, rec.Body.Bytes(), 409)
			rec = api.do(t, jsonRequest(http.MethodPatch, "/api/_triggers/t", `{"status":"paused"}`))
			wantRefusal(t, rec, rec.Body.Bytes(), 400)
			rec = api.do(t, jsonRequest(http.MethodPatch, "/api/_triggers/t", `{"config":{"event":"Bad Kind"}}`))
			wantRefusal(t, rec, rec.Body.Bytes(), 400)
			rec = api.do(t, jsonRequest(http.MethodPatch, "/api/_triggers/nope", `{"status":"active"}`))
			wantRefusal(t, rec, rec.Body.Bytes(), 404)
			rec = api.do(t, jsonRequest(http.MethodDelete, "/api/_triggers/nope", ""))
			wantRefusal(t, rec, rec.Body.Bytes(), 404)
			page := decode[triggers.EventPage](t, api.do(t, get("/api/_triggers/t/events")))
			if page.Total != 1 {
				t.Errorf("trigger t holds %d events after refused changes, want its registration", page.Total)
			}
			// The edit form sends a filter as the text of a JSON object.
			rec = api.do(t, jsonRequest(http.MethodPatch, "/api/_triggers/t", `{"config":{"event":"order.created","filter":"{\"region\": \"us\"}"}}`))
			wantStatus(t, rec, http.StatusOK)
			if got := decode[triggers.Trigger](t, api.do(t, get("/api/_triggers/t"))); string(got.Config) != `{"event":"order.created","filter":{"region":"us"}}` {
				t.Errorf("config %s", got.Config)
			}
			wantStatus(t, api.do(t, get("/api/_triggers/bad%20name")), http.StatusBadRequest)
			wantStatus(t, api.do(t, get("/api/_triggers/t/events?limit=0")), http.StatusBadRequest)
		})
	}
}

func TestWebhookTriggerAuth(t *testing.T) {
	for _, backend := range triggerBackends {
		t.Run(backend, func(t *testing.T) {
			api := newTriggerAPI(t, backend)
			api.define(t, "f", `{"entry":"a","steps":{"a":{"queue":"q1"}}}`)
			secret := "a-secret-of-some-length"
			wantStatus(t, api.do(t, post("/api/_triggers", `{"name":"hook","type":"webhook","config":{"requireAuth":true,"secret":"`+secret+`"},"subscriptions":["f"]}`)), http.StatusOK)
			wantStatus(t, api.do(t, post("/api/_triggers", `{"name":"open","type":"webhook","subscriptions":["f"]}`)), http.StatusOK)

			wantStatus(t, api.do(t, post("/api/_webhook/trigger/hook", `{"n":1}`)), http.StatusUnauthorized)
			wantStatus(t, api.do(t, jsonRequest(http.MethodPost, "/api/_webhook/trigger/hook", `{"n":1}`, "X-API-Key", "wrong-secret-of-length")), http.StatusUnauthorized)
			wantStatus(t, api.do(t, post("/api/_webhook/trigger/open", `{"n":1}`)), http.StatusUnauthorized)
			for key, n := range map[string]int{"trigger/missing_secret": 1, "trigger/bad_secret": 1, "trigger/no_secret": 1} {
				if got := api.refusals.count(key); got != n {
					t.Errorf("refusals %s = %d, want %d", key, got, n)
				}
			}
			if got := decode[triggers.Trigger](t, api.do(t, get("/api/_triggers/hook"))); got.Stats.TotalFires != 0 {
				t.Fatalf("refused calls fired: %+v", got.Stats)
			}
			rec := api.do(t, jsonRequest(http.MethodGet, "/api/_webhook/trigger/hook", "", "X-API-Key", secret))
			wantStatus(t, rec, http.StatusMethodNotAllowed)
			if rec.Header().Get("Allow") != "POST" {
				t.Errorf("Allow %q", rec.Header().Get("Allow"))
			}
			wantStatus(t, api.do(t, jsonRequest(http.MethodPost, "/api/_webhook/trigger/nope", "{}", "X-API-Key", secret)), http.StatusNotFound)

			rec = api.do(t, jsonRequest(http.MethodPost, "/api/_webhook/trigger/hook", `{"n":1}`, "X-API-Key", secret))
			wantStatus(t, rec, http.StatusOK)
			fired := decode[struct {
				Success         bool              `json:"success"`
				SubscribedFlows []string          `json:"subscribedFlows"`
				Runs            map[string]string `json:"runs"`
			}](t, rec)
			if !fired.Success || len(fired.SubscribedFlows) != 1 || fired.Runs["f"] == "" {
				t.Fatalf("fired %s", rec.Body)
			}
			runs, err := api.eng.Runs(t.Context(), "f", "", 0, 10)
			if err != nil || len(runs.Runs) != 1 || runs.Runs[0].RunID != fired.Runs["f"] {
				t.Fatalf("runs of f: %+v, %v", runs, err)
			}
			page := decode[triggers.EventPage](t, api.do(t, get("/api/_triggers/hook/events?types=trigger.fired")))
			if page.Count != 1 || strings.Contains(string(page.Events[0].Data), secret) {
				t.Errorf("trigger.fired %+v (the secret must not be recorded)", page.Events)
			}

			// An operator who opts in lets a trigger without a secret fire.
			openAPI := newTriggerAPI(t, backend, func(d *handlers.Deps) { d.OpenWebhooks = true })
			openAPI.define(t, "f", `{"entry":"a","steps":{"a":{"queue":"q1"}}}`)
			wantStatus(t, openAPI.do(t, post("/api/_triggers", `{"name":"open","type":"webhook","subscriptions":["f"]}`)), http.StatusOK)
			wantStatus(t, openAPI.do(t, post("/api/_webhook/trigger/open", `{"n":1}`)), http.StatusOK)
		})
	}
}

func TestWebhookAwait(t *testing.T) {
	for _, backend := range triggerBackends {
		t.Run(backend, func(t *testing.T) {
			api := newTriggerAPI(t, backend)
			api.define(t, "approve", `{"entry":"wait","steps":{"wait":{"queue":"q1","await":{"type":"trigger","timeout":600000}}}}`)
			api.define(t, "sleep", `{"entry":"nap","steps":{"nap":{"queue":"q1","await":{"type":"time","delay":600000}}}}`)
			run, err := api.eng.Start(t.Context(), "approve", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			waits, err := api.eng.Waits(t.Context(), engine.WaitQuery{FlowName: "approve"})
			if err != nil || len(waits) != 1 {
				t.Fatalf("waits %+v, %v", waits, err)
			}
			id := waits[0].TriggerID
			url := "/api/_webhook/await/approve/" + run.FlowID + "/wait"

			wantStatus(t, api.do(t, post(url, `{"ok":true}`)), http.StatusUnauthorized)
			wantStatus(t, api.do(t, jsonRequest(http.MethodPost, url, `{"ok":true}`, handlers.TriggerIDHeader, id+"x")), http.StatusUnauthorized)
			if api.refusals.count("await/no_secret") != 1 || api.refusals.count("await/bad_secret") != 1 {
				t.Errorf("refusals %v", api.refusals.n)
			}
			wantStatus(t, api.do(t, jsonRequest(http.MethodPut, url, `{}`, handlers.TriggerIDHeader, id)), http.StatusMethodNotAllowed)
			wantStatus(t, api.do(t, jsonRequest(http.MethodPost, "/api/_webhook/await/approve/no-such-run/wait", `{}`, handlers.TriggerIDHeader, id)), http.StatusNotFound)
			wantStatus(t, api.do(t, jsonRequest(http.MethodPost, "/api/_webhook/await/approve/"+run.FlowID+"/other", `{}`, handlers.TriggerIDHeader, id)), http.StatusGone)
			wantStatus(t, api.do(t, jsonRequest(http.MethodPost, "/api/_webhook/await/approve/"+run.FlowID+"/bad%20step", `{}`)), http.StatusBadRequest)

			rec := api.do(t, jsonRequest(http.MethodPost, url, `{"ok":true}`, handlers.TriggerIDHeader, id))
			wantStatus(t, rec, http.StatusOK)
			if !strings.Contains(rec.Body.String(), `"stepName":"wait"`) {
				t.Errorf("answered %s", rec.Body)
			}
			jobs, err := api.eng.Claim(t.Context(), []string{"q1"}, 1, 0)
			if err != nil || len(jobs) != 1 || !strings.Contains(string(jobs[0].Input), `"ok":true`) {
				t.Fatalf("claimed %+v, %v; want the step with the payload", jobs, err)
			}
			wantStatus(t, api.do(t, jsonRequest(http.MethodPost, url, `{"ok":true}`, handlers.TriggerIDHeader, id)), http.StatusGone)

			nap, err := api.eng.Start(t.Context(), "sleep", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			wantStatus(t, api.do(t, jsonRequest(http.MethodPost, "/api/_webhook/await/sleep/"+nap.FlowID+"/nap", `{}`, handlers.TriggerIDHeader, id)), http.StatusBadRequest)
			jobsPage := decode[struct {
				Jobs []struct {
					Type      string `json:"type"`
					ExecuteAt int64  `json:"executeAt"`
				} `json:"jobs"`
				Stats struct {
					Total int `json:"total"`
				} `json:"stats"`
			}](t, api.do(t, get("/api/_scheduler/jobs")))
			if jobsPage.Stats.Total != 1 || jobsPage.Jobs[0].Type != "one-time" || jobsPage.Jobs[0].ExecuteAt <= 0 {
				t.Errorf("scheduler jobs %+v", jobsPage)
			}
		})
	}
}

func TestSchedulerListsScheduleTriggers(t *testing.T) {
	api := newTriggerAPI(t, "bolt")
	wantStatus(t, api.do(t, post("/api/_triggers", `{"name":"hourly","type":"schedule","config":{"cron":"0 * * * *","timezone":"Europe/Berlin"}}`)), http.StatusOK)
	wantStatus(t, api.do(t, post("/api/_triggers", `{"name":"tick","type":"schedule","config":{"interval":90}}`)), http.StatusOK)
	body := api.do(t, get("/api/_scheduler/jobs")).Body.String()
	for _, want := range []string{`"type":"cron","cron":"0 * * * *","timezone":"Europe/Berlin"`, `"type":"interval","interval":90000`, `"total":2`} {
		if !strings.Contains(body, want) {
			t.Errorf("scheduler jobs %s lack %s", body, want)
		}
	}
}

// TestTriggerRegistryOnTwoInstances: what one instance registers, changes
// and fires, another serves the same, on Redis and on PostgreSQL.
func TestTriggerRegistryOnTwoInstances(t *testing.T) {
	for _, backend := range []string{"redis", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			shared := redistest.Prefix(t)
			if backend == "postgres" {
				shared = pgtest.URL(t)
			}
			a := triggerAPIOn(t, openTriggerStore(t, backend, shared))
			b := triggerAPIOn(t, openTriggerStore(t, backend, shared))
			a.define(t, "f", `{"entry":"a","steps":{"a":{"queue":"q1"}}}`)
			wantStatus(t, a.do(t, post("/api/_triggers", `{"name":"shared","type":"manual","subscriptions":["f"]}`)), http.StatusOK)
			wantStatus(t, b.do(t, jsonRequest(http.MethodPatch, "/api/_triggers/shared", `{"description":"changed on b"}`)), http.StatusOK)
			wantStatus(t, b.do(t, post("/api/_triggers/shared/fire", `{"n":1}`)), http.StatusOK)
			rec := b.do(t, post("/api/_triggers", `{"name":"shared","type":"manual"}`))
			wantRefusal(t, rec, rec.Body.Bytes(), 409)
			for _, target := range []string{"/api/_triggers", "/api/_triggers/shared", "/api/_triggers/shared/events", "/api/_triggers/stats"} {
				fromA, fromB := a.do(t, get(target)).Body.String(), b.do(t, get(target)).Body.String()
				if fromA != fromB {
					t.Errorf("%s: a answers\n%s\nb answers\n%s", target, fromA, fromB)
				}
			}
			got := decode[triggers.Trigger](t, a.do(t, get("/api/_triggers/shared")))
			if got.Description != "changed on b" || got.Stats.TotalFires != 1 || got.Stats.TotalFlowsStarted != 1 {
				t.Errorf("a serves %+v", got)
			}
		})
	}
}

// TestEventTriggerThroughTheAPI: an event appended through the API fires
// the event trigger that waits for it, which starts its flow, once.
func TestEventTriggerThroughTheAPI(t *testing.T) {
	for _, backend := range triggerBackends {
		t.Run(backend, func(t *testing.T) {
			api := newTriggerAPI(t, backend)
			api.define(t, "f", `{"entry":"a","steps":{"a":{"queue":"q1"}}}`)
			wantStatus(t, api.do(t, post("/api/_triggers", `{"name":"paid","type":"event","config":{"event":"invoice.paid","filter":"event.data.amount >= 100"},"subscriptions":["f"]}`)), http.StatusOK)
			wantStatus(t, api.do(t, post("/api/_events/invoice/i-1", `{"events":[{"kind":"invoice.paid","data":{"amount":50}},{"kind":"invoice.paid","data":{"amount":150}}]}`)), http.StatusCreated)
			w := triggers.NewWatcher()
			for range 2 {
				if err := api.reg.Look(t.Context(), w); err != nil {
					t.Fatal(err)
				}
			}
			got := decode[triggers.Trigger](t, api.do(t, get("/api/_triggers/paid")))
			if got.Stats.TotalFires != 1 || got.Stats.TotalFlowsStarted != 1 {
				t.Fatalf("stats %+v, want one fire that started f", got.Stats)
			}
			runs, err := api.eng.Runs(t.Context(), "f", "", 0, 10)
			if err != nil || len(runs.Runs) != 1 {
				t.Fatalf("runs of f: %+v, %v", runs, err)
			}
			page := decode[triggers.EventPage](t, api.do(t, get("/api/_triggers/paid/events?types=trigger.fired")))
			if page.Count != 1 || !strings.Contains(string(page.Events[0].Data), `"amount":150`) {
				t.Errorf("fires %+v", page.Events)
			}
		})
	}
}
