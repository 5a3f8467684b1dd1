package handlers_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/stream"
)

// Secrets of the test tokens, one per scope.
const (
	readSecret  = "read-0123456789abcdef0123456789abcdef"
	writeSecret = "write-0123456789abcdef0123456789abcdef"
	adminSecret = "admin-0123456789abcdef0123456789abcdef"
)

// withTokens turns access control on with a token of each scope, and the
// flow engine and the streams on, so that every route is mounted.
func withTokens(t testing.TB, access handlers.Access) func(*handlers.Deps) {
	return func(d *handlers.Deps) {
		toks, err := auth.ParseTokens("reader:read:" + readSecret + ",writer:write:" + writeSecret + ",admin:admin:" + adminSecret)
		if err != nil {
			t.Fatal(err)
		}
		if access.Auth == nil {
			access.Auth = auth.New(auth.NewTokens(toks), nil, nil)
		}
		d.Access = access
		eng := engine.New(d.Store.(engine.Store), engine.Options{Logger: d.Log})
		d.Engine = eng
		d.KV = d.Store.(handlers.KV)
		sh := stream.NewHandler(stream.Options{Store: d.Store.(stream.Source), Log: d.Log, TrustLive: true})
		t.Cleanup(sh.Close)
		d.Stream = sh
		d.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("up 1\n"))
		})
	}
}

func bearer(secret string) http.Header {
	return http.Header{"Authorization": {"Bearer " + secret}}
}

// routeScopes is the scope each route needs; a route missing here fails
// TestEveryRouteNeedsItsScope, so a new route gets one on purpose.
var routeScopes = map[string]auth.Scope{
	"GET /healthz":                                      0,
	"HEAD /healthz":                                     0,
	"GET /readyz":                                       0,
	"HEAD /readyz":                                      0,
	"GET /metrics":                                      auth.Read,
	"POST /api/_auth/stream-token":                      auth.Read,
	"GET /api/_events/{type}/list":                      auth.Read,
	"GET /api/_events/{type}/{id}":                      auth.Read,
	"POST /api/_events/{type}/{id}":                     auth.Write,
	"GET /api/_events/{type}/{id}/state":                auth.Read,
	"GET /api/_events/{type}/{id}/state/diff":           auth.Read,
	"GET /api/_events/{type}/{id}/data/{sha256}":        auth.Read,
	"POST /api/_events/{type}/{id}/restore":             auth.Admin,
	"POST /api/_events/{type}/{id}/compact":             auth.Admin,
	"GET /api/_events/{type}/{id}/stream":               auth.Read,
	"GET /api/_events/sse":                              auth.Read,
	"GET /api/_events/{key}":                            auth.Read,
	"GET /api/_queues":                                  auth.Read,
	"GET /api/_workers":                                 auth.Read,
	"POST /api/_workers/goodbye":                        auth.Write,
	"GET /api/_queues/metrics":                          auth.Read,
	"GET /api/_queues/{queue}":                          auth.Read,
	"GET /api/_queues/{queue}/metrics":                  auth.Read,
	"POST /api/_queues/{queue}/pause":                   auth.Admin,
	"POST /api/_queues/{queue}/resume":                  auth.Admin,
	"GET /api/_queues/{queue}/job":                      auth.Read,
	"POST /api/_queues/{queue}/job":                     auth.Write,
	"GET /api/_queues/{queue}/job/{jobId}":              auth.Read,
	"GET /api/_queues/{queue}/job/{jobId}/logs":         auth.Read,
	"GET /api/_flows":                                   auth.Read,
	"GET /api/_flows/{name}":                            auth.Read,
	"PUT /api/_flows/{name}":                            auth.Admin,
	"DELETE /api/_flows/{name}":                         auth.Admin,
	"GET /api/_flows/{name}/diagram":                    auth.Read,
	"POST /api/_flows/{name}/start":                     auth.Write,
	"GET /api/_flows/{name}/runs":                       auth.Read,
	"POST /api/_flows/{name}/runs/{runId}/cancel":       auth.Admin,
	"POST /api/_flows/{name}/runs/{runId}/restart":      auth.Admin,
	"DELETE /api/_flows/{name}/clear-history":           auth.Admin,
	"POST /api/_flows/{name}/schedule":                  auth.Write,
	"GET /api/_flows/{name}/schedules":                  auth.Read,
	"DELETE /api/_flows/{name}/schedules/{id}":          auth.Write,
	"GET /api/_scheduler/jobs/{id}/preview":             auth.Read,
	"GET /api/_scheduler/schedules":                     auth.Read,
	"POST /api/_scheduler/jobs/{id}/fire":               auth.Write,
	"POST /api/_scheduler/jobs/{id}/backfill":           auth.Admin,
	"POST /api/_scheduler/jobs/{id}/pause":              auth.Admin,
	"POST /api/_scheduler/jobs/{id}/resume":             auth.Admin,
	"POST /api/_flows/triggers/{id}":                    0,
	"GET /api/_flows/ws":                                auth.Read,
	"GET /api/_queues/ws":                               auth.Read,
	"GET /api/_triggers/ws":                             auth.Read,
	"GET /api/_flows/waits":                             auth.Read,
	"POST /api/_workers/claim":                          auth.Write,
	"GET /api/_workers/channel":                         auth.Write,
	"POST /api/_workers/jobs/{queue}/{jobId}/heartbeat": auth.Write,
	"POST /api/_workers/jobs/{queue}/{jobId}/events":    auth.Write,
	"POST /api/_workers/jobs/{queue}/{jobId}/complete":  auth.Write,
	"POST /api/_workers/jobs/{queue}/{jobId}/fail":      auth.Write,
	"GET /api/_kv":                                      auth.Read,
	"GET /api/_kv/{key}":                                auth.Read,
	"PUT /api/_kv/{key}":                                auth.Write,
	"DELETE /api/_kv/{key}":                             auth.Write,
	"GET /api/_kv/{key}/fields/{field}":                 auth.Read,
	"POST /api/_kv/{key}/fields":                        auth.Write,
	"POST /api/_kv/{key}/cas":                           auth.Write,
	"GET /api/_triggers":                                auth.Read,
	"POST /api/_triggers":                               auth.Write,
	"GET /api/_triggers/stats":                          auth.Read,
	"GET /api/_triggers/{name}":                         auth.Read,
	"PATCH /api/_triggers/{name}":                       auth.Write,
	"DELETE /api/_triggers/{name}":                      auth.Write,
	"GET /api/_triggers/{name}/events":                  auth.Read,
	"POST /api/_triggers/{name}/fire":                   auth.Write,
	"GET /api/_scheduler/jobs":                          auth.Read,
}

func init() {
	// The webhooks take any method; a secret, a trigger id or a token is
	// their credential, checked by the route.
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		routeScopes[m+" /api/_webhook/trigger/{name}"] = 0
		routeScopes[m+" /api/_webhook/await/{flow}/{runId}/{step}"] = 0
	}
}

// concrete fills a route pattern's parameters.
var concrete = strings.NewReplacer("{type}", "flow", "{id}", "run-1", "{name}", "demo", "{runId}", "run-1",
	"{queue}", "q1", "{jobId}", "run-1:a", "{key}", "k1", "{field}", "f1", "{flow}", "demo", "{step}", "a")

func TestEveryRouteNeedsItsScope(t *testing.T) {
	api := newTestAPI(t, withTokens(t, handlers.Access{}))
	secrets := map[auth.Scope]string{auth.Read: readSecret, auth.Write: writeSecret, auth.Admin: adminSecret}
	walked := map[string]bool{}
	var allowed []func()
	err := chi.Walk(api.h.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		key := method + " " + strings.TrimSuffix(strings.ReplaceAll(route, "/*/", "/"), "/")
		walked[key] = true
		need, ok := routeScopes[key]
		if !ok {
			t.Errorf("%s has no scope in routeScopes", key)
			return nil
		}
		target := concrete.Replace(strings.TrimSuffix(strings.ReplaceAll(route, "/*/", "/"), "/"))
		if key == "GET /api/_events/sse" {
			target += "?stream=nq:flow:run-1"
		}
		body := ""
		switch {
		case strings.HasSuffix(key, "/fail"):
			body = `{"lease":"lease-1","error":"boom"}`
		case strings.HasPrefix(key, "POST /api/_workers/jobs/"):
			body = `{"lease":"lease-1"}`
		case method == http.MethodPost || method == http.MethodPut:
			body = `{"kind":"x.y"}`
		}
		try := func(name string, h http.Header, want int) {
			t.Helper()
			req := request{method: method, target: target, body: body, header: h}
			rec := api.do(t, req)
			if rec.Code != want {
				t.Errorf("%s %s: status %d, want %d; %s", key, name, rec.Code, want, rec.Body)
			}
			if want == http.StatusUnauthorized && rec.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s: a 401 without WWW-Authenticate", key, name)
			}
		}
		if need == 0 {
			want := http.StatusOK
			if strings.Contains(key, "/triggers/") || strings.Contains(key, "/_webhook/") {
				want = http.StatusNotFound // admitted without a token, to find no such trigger
			}
			try("without a token", nil, want)
			return nil
		}
		try("without a token", nil, http.StatusUnauthorized)
		try("with an unknown token", bearer("not-a-token-0123456789abcdef0123456789"), http.StatusUnauthorized)
		try("with another scheme", http.Header{"Authorization": {"Basic " + readSecret}}, http.StatusUnauthorized)
		if need > auth.Read {
			try("with a "+(need-1).String()+" token", bearer(secrets[need-1]), http.StatusForbidden)
		}
		if strings.HasSuffix(key, "/stream") || strings.HasSuffix(key, "/sse") {
			return nil // an admitted stream never ends here; TestStreamCapPerClient opens one
		}
		allowed = append(allowed, func() {
			req := request{method: method, target: target, body: body, header: bearer(secrets[need])}
			if rec := api.do(t, req); rec.Code == http.StatusUnauthorized || rec.Code == http.StatusForbidden {
				t.Errorf("%s with a %s token: status %d; %s", key, need, rec.Code, rec.Body)
			}
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for key := range routeScopes {
		if !walked[key] {
			t.Errorf("routeScopes names %s, which the router lacks", key)
		}
	}
	wantUnchanged(t, api)
	for _, try := range allowed {
		try()
	}
}

// wantUnchanged fails unless refused requests left the store as it was.
func wantUnchanged(t *testing.T, api *testAPI) {
	t.Helper()
	info, err := api.store.Info(context.Background(), store.Context{Type: "flow", ID: "run-1"})
	if err != nil {
		t.Fatal(err)
	}
	page, err := api.store.IndexList(context.Background(), store.Index{Type: "flow"}, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if info.Length != 0 || page.Total != 0 {
		t.Errorf("refused requests changed the store: %d events, %d contexts", info.Length, page.Total)
	}
}

func TestScopedTokensPass(t *testing.T) {
	api := newTestAPI(t, withTokens(t, handlers.Access{}))
	wantStatus(t, api.do(t, request{method: http.MethodPost, target: "/api/_events/flow/run-1", body: `{"kind":"x.y"}`, header: bearer(writeSecret)}), http.StatusCreated)
	wantStatus(t, api.do(t, request{method: http.MethodPost, target: "/api/_events/flow/run-1", body: `{"kind":"x.y"}`, header: bearer(adminSecret)}), http.StatusCreated)
	rec := api.do(t, request{method: http.MethodGet, target: "/api/_events/flow/run-1", header: bearer(readSecret)})
	wantStatus(t, rec, http.StatusOK)
	if got := decode[struct{ EventCount int }](t, rec).EventCount; got != 2 {
		t.Errorf("eventCount %d, want 2", got)
	}
}

func TestStreamTokens(t *testing.T) {
	now := epoch
	clock := func() time.Time { return now }
	toks, _ := auth.ParseTokens("reader:read:" + readSecret)
	api := newTestAPI(t, withTokens(t, handlers.Access{Auth: auth.New(auth.NewTokens(toks), nil, clock)}))

	issue := func(body string) string {
		t.Helper()
		rec := api.do(t, request{method: http.MethodPost, target: "/api/_auth/stream-token", body: body, header: bearer(readSecret)})
		wantStatus(t, rec, http.StatusCreated)
		return decode[struct{ Token string }](t, rec).Token
	}
	one := issue(`{"type":"flow","id":"run-1","ttl":60}`)
	every := issue(`{"type":"flow","id":"*"}`)
	wantStatus(t, api.do(t, request{method: http.MethodPost, target: "/api/_auth/stream-token", body: `{"type":"flow","id":"*","ttl":7200}`, header: bearer(readSecret)}), http.StatusBadRequest)

	for _, tt := range []struct {
		name, target string
		want         int
	}{
		{"another context", "/api/_events/flow/run-2/stream?access_token=" + one, http.StatusForbidden},
		{"another type", "/api/_events/trigger/run-1/stream?access_token=" + every, http.StatusForbidden},
		{"raw tail of another context", "/api/_events/sse?stream=nq:flow:run-2&access_token=" + one, http.StatusForbidden},
		{"a forged token", "/api/_events/flow/run-1/stream?access_token=" + one[:len(one)-2] + "xx", http.StatusUnauthorized},
		{"a stream token on a read route", "/api/_events/flow/run-1?access_token=" + one, http.StatusUnauthorized},
	} {
		if rec := api.do(t, get(tt.target)); rec.Code != tt.want {
			t.Errorf("%s: status %d, want %d; %s", tt.name, rec.Code, tt.want, rec.Body)
		}
	}
	now = now.Add(61 * time.Second)
	rec := api.do(t, get("/api/_events/flow/run-1/stream?access_token="+one))
	wantStatus(t, rec, http.StatusUnauthorized)
	if got := decode[errorBody](t, rec).Error.Message; !strings.Contains(got, "expired") {
		t.Errorf("expired token: message %q", got)
	}
	wantUnchanged(t, api)
}

// TestStreamEndsAtExpiry runs on a synctest bubble's clock: a stream opened
// with a token of ttl 1, issued late in a second, lives at least that second
// and ends exactly when the token expires.
func TestStreamEndsAtExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newTestAPI(t, withTokens(t, handlers.Access{}))
		srv := testkit.PipeServer(t, api.h)
		// Late in a second, where an expiry rounded down to the second
		// would leave the token a tenth of its life.
		time.Sleep(900 * time.Millisecond)
		issued := time.Now()

		var tok struct{ Token, ExpiresAt string }
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/_auth/stream-token", strings.NewReader(`{"type":"flow","id":"run-1","ttl":1,"cookie":true}`))
		req.Header.Set("Authorization", "Bearer "+readSecret)
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if err := decodeJSON(res, &tok); err != nil || res.StatusCode != http.StatusCreated {
			t.Fatalf("issue: %d %v", res.StatusCode, err)
		}
		cookies := res.Cookies()
		if len(cookies) != 1 || cookies[0].Name != auth.StreamTokenCookie || !cookies[0].HttpOnly {
			t.Fatalf("cookies %+v, want one HttpOnly %s", cookies, auth.StreamTokenCookie)
		}
		exp, err := time.Parse(time.RFC3339Nano, tok.ExpiresAt)
		if err != nil {
			t.Fatalf("expiresAt %q: %v", tok.ExpiresAt, err)
		}

		sreq, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/_events/flow/run-1/stream", nil)
		sreq.AddCookie(cookies[0])
		sres, err := srv.Client().Do(sreq)
		if err != nil {
			t.Fatal(err)
		}
		defer sres.Body.Close()
		if sres.StatusCode != http.StatusOK {
			t.Fatalf("stream by cookie: status %d", sres.StatusCode)
		}
		sc := bufio.NewScanner(sres.Body)
		for sc.Scan() {
		}
		ended := time.Now()
		if lived := ended.Sub(issued); lived < time.Second {
			t.Errorf("the stream of a token of ttl 1 ended %v after the token was issued", lived)
		}
		if !ended.Equal(exp) {
			t.Errorf("the stream ended at %s, want at its token's expiry %s", ended, exp)
		}
	})
}

func TestCORSPreflightNeedsNoToken(t *testing.T) {
	api := newTestAPI(t, withTokens(t, handlers.Access{}), func(d *handlers.Deps) { d.CORSOrigins = []string{"https://ui.example"} })
	preflight := func(origin string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodOptions, "/api/_events/flow/run-1", nil)
		r.Header.Set("Origin", origin)
		r.Header.Set("Access-Control-Request-Method", http.MethodPost)
		r.Header.Set("Access-Control-Request-Headers", "authorization,content-type")
		rec := httptest.NewRecorder()
		api.h.ServeHTTP(rec, r)
		return rec
	}
	ok := preflight("https://ui.example")
	if ok.Code >= 300 || ok.Header().Get("Access-Control-Allow-Origin") != "https://ui.example" ||
		!strings.Contains(strings.ToLower(ok.Header().Get("Access-Control-Allow-Headers")), "authorization") {
		t.Errorf("allowed origin: %d, headers %v", ok.Code, ok.Header())
	}
	if got := preflight("https://evil.example").Header().Get("Access-Control-Allow-Origin"); got != "" {
		t.Errorf("refused origin: Access-Control-Allow-Origin = %q, want none", got)
	}
	wantUnchanged(t, api)
}

func TestRateLimits(t *testing.T) {
	t.Run("per address without a token", func(t *testing.T) {
		api := newTestAPI(t, func(d *handlers.Deps) {
			d.Access = handlers.Access{PerAddr: handlers.Rate{Requests: 3, Window: time.Hour}}
		})
		accepted := 0
		for i := range 6 {
			rec := api.do(t, request{method: http.MethodPost, target: "/api/_events/flow/run-1", body: fmt.Sprintf(`{"kind":"x.y","data":{"n":%d}}`, i)})
			switch rec.Code {
			case http.StatusCreated:
				accepted++
			case http.StatusTooManyRequests:
				wantRateRefusal(t, rec, "NQ_RATE_PER_ADDR", "more than 3 in 1h")
			default:
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
		}
		if accepted != 3 {
			t.Errorf("%d appends accepted, want 3", accepted)
		}
		wantEvents(t, api, accepted)
	})
	t.Run("per token", func(t *testing.T) {
		// The address's budget would refuse the third request of either
		// token: a token's requests are counted against the token alone,
		// as behind a Nuxt server every user's come from one address.
		api := newTestAPI(t, withTokens(t, handlers.Access{
			PerToken: handlers.Rate{Requests: 2, Window: time.Hour},
			PerAddr:  handlers.Rate{Requests: 2, Window: time.Hour},
		}))
		codes := func(secret string) (got []int) {
			for range 3 {
				rec := api.do(t, request{method: http.MethodPost, target: "/api/_events/flow/run-1", body: `{"kind":"x.y"}`, header: bearer(secret)})
				if rec.Code == http.StatusTooManyRequests {
					wantRateRefusal(t, rec, "NQ_RATE_PER_TOKEN", "more than 2 in 1h")
				}
				got = append(got, rec.Code)
			}
			return got
		}
		want := fmt.Sprint([]int{201, 201, 429})
		if w, a := fmt.Sprint(codes(writeSecret)), fmt.Sprint(codes(adminSecret)); w != want || a != want {
			t.Errorf("writer %s, admin %s; want %s each: a token's budget is its own", w, a, want)
		}
		wantEvents(t, api, 4)
	})
}

// wantRateRefusal checks a 429: Retry-After, and a message that says the
// limit and the setting that raises it.
func wantRateRefusal(t *testing.T, rec *httptest.ResponseRecorder, setting, limit string) {
	t.Helper()
	if rec.Header().Get("Retry-After") == "" {
		t.Error("a 429 without Retry-After")
	}
	e := decode[errorBody](t, rec)
	if e.Error.Code != "rate_limited" || !strings.Contains(e.Error.Message, setting) || !strings.Contains(e.Error.Message, limit) {
		t.Errorf("429 body %+v, want rate_limited naming %s and %q", e.Error, setting, limit)
	}
}

func wantEvents(t *testing.T, api *testAPI, n int) {
	t.Helper()
	info, err := api.store.Info(context.Background(), store.Context{Type: "flow", ID: "run-1"})
	if err != nil {
		t.Fatal(err)
	}
	if info.Length != int64(n) {
		t.Errorf("the stream holds %d events, want %d: every accepted event and no refused one", info.Length, n)
	}
}

func TestEventSizeLimit(t *testing.T) {
	api := newTestAPI(t, func(d *handlers.Deps) { d.Limits.MaxEventBytes = 1024 })
	big := `{"kind":"x.y","data":"` + strings.Repeat("x", 1100) + `"}`
	for _, body := range []string{big, `{"events":[{"kind":"x.y"},` + big + `]}`} {
		rec := api.do(t, post("/api/_events/flow/run-1", body))
		wantStatus(t, rec, http.StatusRequestEntityTooLarge)
		if got := decode[errorBody](t, rec).Error.Code; got != nqd.CodeTooLarge {
			t.Errorf("code %q, want %s", got, nqd.CodeTooLarge)
		}
	}
	wantEvents(t, api, 0)
	wantStatus(t, api.do(t, post("/api/_events/flow/run-1", `{"kind":"x.y","data":"`+strings.Repeat("x", 900)+`"}`)), http.StatusCreated)
}

func TestStreamCapPerClient(t *testing.T) {
	api := newTestAPI(t, withTokens(t, handlers.Access{MaxStreams: 1}))
	srv := httptest.NewServer(api.h)
	t.Cleanup(srv.Close)
	open := func() *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/api/_events/flow/run-1/stream", nil)
		req.Header.Set("Authorization", "Bearer "+readSecret)
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		return res
	}
	if first := open(); first.StatusCode != http.StatusOK {
		t.Fatalf("first stream: %d", first.StatusCode)
	}
	second := open()
	if second.StatusCode != http.StatusTooManyRequests || second.Header.Get("Retry-After") == "" {
		t.Errorf("second stream: %d, Retry-After %q; want 429 with Retry-After", second.StatusCode, second.Header.Get("Retry-After"))
	}
}

func TestTokensNeverLogged(t *testing.T) {
	var buf bytes.Buffer
	api := newTestAPI(t, withTokens(t, handlers.Access{}), func(d *handlers.Deps) { d.Log = zerolog.New(&buf).Level(zerolog.TraceLevel) })
	api.do(t, request{method: http.MethodPost, target: "/api/_events/flow/run-1", body: `{"kind":"x.y"}`, header: bearer(readSecret)})
	api.do(t, request{method: http.MethodGet, target: "/api/_events/flow/run-1?access_token=" + adminSecret, header: bearer("wrong-" + writeSecret)})
	if buf.Len() == 0 {
		t.Fatal("nothing was logged")
	}
	for _, s := range []string{readSecret, writeSecret, adminSecret} {
		if strings.Contains(buf.String(), s) {
			t.Errorf("the log shows a secret:\n%s", buf.String())
		}
	}
}

func decodeJSON(res *http.Response, v any) error {
	defer res.Body.Close()
	return json.NewDecoder(res.Body).Decode(v)
}

// TestTriggerWebhooksLimitedByAddress: a trigger POST carries no token, so
// only the per-address budget applies to it; anonymous callers do not share
// one per-token bucket.
func TestTriggerWebhooksLimitedByAddress(t *testing.T) {
	api := newTestAPI(t, withTokens(t, handlers.Access{
		PerAddr:  handlers.Rate{Requests: 2, Window: time.Hour},
		PerToken: handlers.Rate{Requests: 1, Window: time.Hour},
	}))
	var got []int
	for range 3 {
		got = append(got, api.do(t, post("/api/_flows/triggers/tg1.k.0.nonce.mac", `{"approved":true}`)).Code)
	}
	if got[0] == http.StatusTooManyRequests || got[1] == http.StatusTooManyRequests || got[2] != http.StatusTooManyRequests {
		t.Fatalf("statuses %v: want the per-address budget of 2, then 429", got)
	}
}
