package handlers_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/sweeper"
)

// withKV serves the KV routes from the test's embedded store.
func withKV(d *handlers.Deps) { d.KV = d.Store.(handlers.KV) }

type kvRecordBody struct {
	Key     string            `json:"key"`
	Fields  map[string]string `json:"fields"`
	Version int64             `json:"version"`
	TTLMs   int64             `json:"ttlMs"`
}

type kvWrittenBody struct {
	Key     string `json:"key"`
	Version int64  `json:"version"`
}

func kvReq(method, target, body string) request {
	return request{method: method, target: target, body: body}
}

func TestKVRoundTrip(t *testing.T) {
	api := newTestAPI(t, withKV)
	const rec = "/api/_kv/tasks.email.job-1"

	wantStatus(t, api.do(t, get(rec)), http.StatusNotFound)
	w := decode[kvWrittenBody](t, api.do(t, kvReq(http.MethodPut, rec, `{"fields":{"state":"pending","updated_at":"1000"},"ttlMs":60000}`)))
	if w != (kvWrittenBody{Key: "tasks.email.job-1", Version: 1}) {
		t.Errorf("PUT: %+v", w)
	}
	got := decode[kvRecordBody](t, api.do(t, get(rec)))
	if got.TTLMs <= 0 || got.TTLMs > 60000 {
		t.Errorf("ttlMs %d, want in (0, 60000]", got.TTLMs)
	}
	got.TTLMs = 0
	want := kvRecordBody{Key: "tasks.email.job-1", Fields: map[string]string{"state": "pending", "updated_at": "1000"}, Version: 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GET (-want +got):\n%s", diff)
	}

	field := decode[map[string]string](t, api.do(t, get(rec+"/fields/state")))
	if field["value"] != "pending" {
		t.Errorf("GET field: %v", field)
	}
	wantStatus(t, api.do(t, get(rec+"/fields/worker")), http.StatusNotFound)

	w = decode[kvWrittenBody](t, api.do(t, post(rec+"/fields", `{"fields":{"step":"2"}}`)))
	if w.Version != 2 {
		t.Errorf("POST fields: version %d, want 2", w.Version)
	}

	// A worker's claim: the first swap wins, the second conflicts.
	claim := `{"field":"state","expected":"pending","set":{"state":"claimed","worker":"w1"}}`
	w = decode[kvWrittenBody](t, api.do(t, post(rec+"/cas", claim)))
	if w.Version != 3 {
		t.Errorf("first claim: version %d, want 3", w.Version)
	}
	rc := api.do(t, post(rec+"/cas", claim))
	wantStatus(t, rc, http.StatusConflict)
	if e := decode[errorBody](t, rc); e.Error.Code != nqd.CodeConflict {
		t.Errorf("second claim: code %q", e.Error.Code)
	}
	wantStatus(t, api.do(t, post(rec+"/cas", `{"version":2,"set":{"worker":"w2"}}`)), http.StatusConflict)
	w = decode[kvWrittenBody](t, api.do(t, post(rec+"/cas", `{"version":3,"set":{"worker":"w3"}}`)))
	if w.Version != 4 {
		t.Errorf("swap on version: version %d, want 4", w.Version)
	}
	// An empty expected value is a value: it does not match a missing field.
	wantStatus(t, api.do(t, post(rec+"/cas", `{"field":"error","expected":"","set":{"worker":"w4"}}`)), http.StatusConflict)

	got = decode[kvRecordBody](t, api.do(t, get(rec)))
	got.TTLMs = 0
	want = kvRecordBody{Key: "tasks.email.job-1", Version: 4,
		Fields: map[string]string{"state": "claimed", "updated_at": "1000", "step": "2", "worker": "w3"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after the swaps (-want +got):\n%s", diff)
	}

	wantStatus(t, api.do(t, post("/api/_kv/tasks.email.job-2/cas", claim)), http.StatusNotFound)
	wantStatus(t, api.do(t, kvReq(http.MethodDelete, rec, "")), http.StatusNoContent)
	wantStatus(t, api.do(t, get(rec)), http.StatusNotFound)
	wantStatus(t, api.do(t, kvReq(http.MethodDelete, rec, "")), http.StatusNotFound)
}

func TestKVExpiresOnTheStoreClock(t *testing.T) {
	api := newTestAPI(t, withKV)
	wantStatus(t, api.do(t, kvReq(http.MethodPut, "/api/_kv/lease", `{"fields":{"worker":"w1"},"ttlMs":1000}`)), http.StatusOK)
	wantStatus(t, api.do(t, get("/api/_kv/lease")), http.StatusOK)
	api.clock.Set(epoch.Add(timeMS(1001)))
	wantStatus(t, api.do(t, get("/api/_kv/lease")), http.StatusNotFound)
}

func TestKVScanRoute(t *testing.T) {
	api := newTestAPI(t, withKV)
	// updated_at of different widths: a string comparison would order
	// them differently from a numeric one.
	updated := map[string]int{"tasks.a.1": 900, "tasks.a.2": 1000, "tasks.a.3": 50, "tasks.b.1": 10, "runs.1": 1}
	for key, at := range updated {
		body := `{"fields":{"state":"running","updated_at":"` + strconv.Itoa(at) + `"}}`
		wantStatus(t, api.do(t, kvReq(http.MethodPut, "/api/_kv/"+key, body)), http.StatusOK)
	}
	type page struct {
		Records []kvRecordBody `json:"records"`
		More    bool           `json:"more"`
	}
	keys := func(p page) string {
		var ks []string
		for _, r := range p.Records {
			ks = append(ks, r.Key)
		}
		return strings.Join(ks, ",")
	}
	tests := []struct {
		query string
		want  string
		more  bool
	}{
		{"", "runs.1,tasks.a.1,tasks.a.2,tasks.a.3,tasks.b.1", false},
		{"prefix=tasks.a.", "tasks.a.1,tasks.a.2,tasks.a.3", false},
		{"prefix=tasks.&field=updated_at&op=lt&value=950", "tasks.a.1,tasks.a.3,tasks.b.1", false},
		{"prefix=tasks.&field=updated_at&op=gt&value=50", "tasks.a.1,tasks.a.2", false},
		{"field=updated_at&op=eq&value=1000", "tasks.a.2", false},
		{"field=state&op=eq&value=running&max=2", "runs.1,tasks.a.1", true},
		{"field=worker&op=eq&value=", "", false},
		{"prefix=none", "", false},
	}
	for _, tt := range tests {
		p := decode[page](t, api.do(t, get("/api/_kv?"+tt.query)))
		if got := keys(p); got != tt.want || p.More != tt.more {
			t.Errorf("scan %q: %q more=%v, want %q more=%v", tt.query, got, p.More, tt.want, tt.more)
		}
	}
}

// TestKVClaimRace is the route a worker pool uses to claim a job: of many
// concurrent swaps exactly one gets 200.
func TestKVClaimRace(t *testing.T) {
	api := newTestAPI(t, withKV)
	wantStatus(t, api.do(t, kvReq(http.MethodPut, "/api/_kv/job", `{"fields":{"state":"pending"}}`)), http.StatusOK)
	const workers = 20
	codes := make([]int, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			body := `{"field":"state","expected":"pending","set":{"state":"claimed","worker":"w` + strconv.Itoa(i) + `"}}`
			codes[i] = api.do(t, post("/api/_kv/job/cas", body)).Code
		})
	}
	wg.Wait()
	won := 0
	for i, c := range codes {
		switch c {
		case http.StatusOK:
			won++
		case http.StatusConflict:
		default:
			t.Errorf("worker %d: status %d", i, c)
		}
	}
	if won != 1 {
		t.Errorf("%d workers claimed the job, want 1", won)
	}
}

func TestKVRejects(t *testing.T) {
	api := newTestAPI(t, withKV)
	wantStatus(t, api.do(t, kvReq(http.MethodPut, "/api/_kv/k", `{"fields":{"state":"pending"}}`)), http.StatusOK)
	big := strings.Repeat("x", 64<<10+1)
	tests := []struct {
		name  string
		req   request
		field string // the offending field named in the answer, if any
	}{
		{"colon in key", get("/api/_kv/" + url.PathEscape("a:b")), "key"},
		{"key starting with a dot", kvReq(http.MethodPut, "/api/_kv/.a", `{"fields":{}}`), "key"},
		{"reserved field name", kvReq(http.MethodPut, "/api/_kv/k", `{"fields":{"_v":"9"}}`), "fields[_v]"},
		{"unknown body field", kvReq(http.MethodPut, "/api/_kv/k", `{"fields":{},"ttl":5}`), "ttl"},
		{"negative ttl", kvReq(http.MethodPut, "/api/_kv/k", `{"fields":{},"ttlMs":-1}`), "ttlMs"},
		{"value not a string", kvReq(http.MethodPut, "/api/_kv/k", `{"fields":{"n":1}}`), "fields.n"},
		{"value over the limit", post("/api/_kv/k/fields", `{"fields":{"big":"`+big+`"}}`), ""},
		{"no fields to set", post("/api/_kv/k/fields", `{"fields":{}}`), "fields"},
		{"swap without a condition", post("/api/_kv/k/cas", `{"set":{"state":"x"}}`), "field"},
		{"expected without a field", post("/api/_kv/k/cas", `{"expected":"x","version":1,"set":{"state":"x"}}`), "expected"},
		{"field without expected", post("/api/_kv/k/cas", `{"field":"state","set":{"state":"x"}}`), "expected"},
		{"swap setting nothing", post("/api/_kv/k/cas", `{"field":"state","expected":"pending","set":{}}`), "set"},
		{"bad field in path", get("/api/_kv/k/fields/_v"), "field"},
		{"glob in prefix", get("/api/_kv?prefix=" + url.QueryEscape("a*")), "prefix"},
		{"unknown op", get("/api/_kv?field=state&op=ne&value=x"), "op"},
		{"filter without a field", get("/api/_kv?op=eq&value=x"), "field"},
		{"max not a number", get("/api/_kv?max=many"), "max"},
		{"offset, which a scan does not take", get("/api/_kv?offset=abc"), "offset"},
		{"negative offset", get("/api/_kv?offset=-1"), "offset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := api.do(t, tt.req)
			wantStatus(t, rec, http.StatusBadRequest)
			e := decode[errorBody](t, rec)
			if _, ok := e.Error.Fields[tt.field]; tt.field != "" && !ok {
				t.Errorf("fields %v do not name %s", e.Error.Fields, tt.field)
			}
		})
	}
	got := decode[kvRecordBody](t, api.do(t, get("/api/_kv/k")))
	if got.Version != 1 || len(got.Fields) != 1 {
		t.Errorf("record after rejected writes: %+v", got)
	}
}

func TestKVScopes(t *testing.T) {
	const readTok, writeTok = "kv-read-0123456789abcdef0123456789abcdef", "kv-write-0123456789abcdef0123456789abcdef"
	api := newTestAPI(t, withKV, func(d *handlers.Deps) {
		toks, err := auth.ParseTokens("reader:read:" + readTok + ",writer:write:" + writeTok)
		if err != nil {
			t.Fatal(err)
		}
		d.Access = handlers.Access{Auth: auth.New(auth.NewTokens(toks), nil, nil)}
	})
	as := func(tok string, req request) request {
		req.header = http.Header{"Authorization": {"Bearer " + tok}}
		return req
	}
	writes := []request{
		kvReq(http.MethodPut, "/api/_kv/k", `{"fields":{"a":"1"}}`),
		post("/api/_kv/k/fields", `{"fields":{"a":"2"}}`),
		post("/api/_kv/k/cas", `{"version":2,"set":{"a":"3"}}`),
		kvReq(http.MethodDelete, "/api/_kv/k", ""),
	}
	for _, req := range writes {
		wantStatus(t, api.do(t, req), http.StatusUnauthorized)
		wantStatus(t, api.do(t, as(readTok, req)), http.StatusForbidden)
	}
	for _, req := range writes[:3] {
		wantStatus(t, api.do(t, as(writeTok, req)), http.StatusOK)
	}
	for _, target := range []string{"/api/_kv/k", "/api/_kv/k/fields/a", "/api/_kv?prefix=k"} {
		wantStatus(t, api.do(t, get(target)), http.StatusUnauthorized)
		wantStatus(t, api.do(t, as(readTok, get(target))), http.StatusOK)
	}
	wantStatus(t, api.do(t, as(writeTok, writes[3])), http.StatusNoContent)
}

// TestKVReservedKeys: nqd's own records (the sweeper's lease, the worker
// registry's) can be read through the KV routes but not written or deleted,
// so no token can forge a lease or a worker.
func TestKVReservedKeys(t *testing.T) {
	api := newTestAPI(t, withKV)
	kv := api.store.(handlers.KV)
	lease := sweeper.LeaseKey
	if _, err := kv.Put(t.Context(), lease, map[string]string{"holder": "instance-1"}, 0); err != nil {
		t.Fatal(err)
	}
	rec := "/api/_kv/" + lease
	for _, r := range []request{
		kvReq(http.MethodPut, rec, `{"fields":{"holder":"forged"}}`),
		post(rec+"/fields", `{"fields":{"holder":"forged"}}`),
		post(rec+"/cas", `{"field":"holder","expected":"instance-1","set":{"holder":"forged"}}`),
		kvReq(http.MethodDelete, rec, ""),
		kvReq(http.MethodPut, "/api/_kv/nqd.worker.w1", `{"fields":{"queues":"q"}}`),
	} {
		res := api.do(t, r)
		wantStatus(t, res, http.StatusForbidden)
		if e := decode[errorBody](t, res); e.Error.Code != nqd.CodeForbidden || !strings.Contains(e.Error.Message, `"nqd."`) {
			t.Errorf("%s %s: %+v, want forbidden naming the prefix", r.method, r.target, e.Error)
		}
	}
	got := decode[kvRecordBody](t, api.do(t, get(rec)))
	if got.Fields["holder"] != "instance-1" || got.Version != 1 {
		t.Errorf("the lease after refused writes: %+v", got)
	}
	wantStatus(t, api.do(t, get("/api/_kv?prefix=nqd.")), http.StatusOK)
	wantStatus(t, api.do(t, get("/api/_kv/nqd.worker.w1")), http.StatusNotFound)
	// Only the prefix with its dot is reserved.
	for _, key := range []string{"nqd", "nqdx.lease", "app.nqd.lease"} {
		wantStatus(t, api.do(t, kvReq(http.MethodPut, "/api/_kv/"+key, `{"fields":{"a":"1"}}`)), http.StatusOK)
	}
}
