package handlers_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/redisstore"
)

// TestRedisFailureAnswers: through the router, on a Redis whose network
// breaks where the test says, an append answers what happened: 201 when a
// lost reply could be resolved, 503 when nothing was sent (nothing stored),
// 504 outcome_unknown when it could not be resolved in time; and the retry
// with the same key then answers the truth.
func TestRedisFailureAnswers(t *testing.T) {
	f := &redistest.Flaky{}
	client := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), MaxRetries: -1, DialerRetries: 1, Dialer: f.Dial})
	t.Cleanup(func() { _ = client.Close() })
	log := testkit.Logger(t)
	st, err := redisstore.New(client, redisstore.Options{Prefix: redistest.Prefix(t), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	api := &testAPI{store: st, h: handlers.New(handlers.Deps{Store: st, Log: log, Limits: handlers.Limits{RequestTimeout: time.Second}}).Routes()}
	c := store.Context{Type: "flow", ID: "run-1"}
	const target = "/api/_events/flow/run-1"
	wantStatus(t, api.do(t, post(target, `{"kind":"warm.up"}`)), http.StatusCreated)

	f.Arm(redistest.LoseReply)
	wantStatus(t, api.do(t, post(target, `{"kind":"a.b"}`)), http.StatusCreated)
	if n := api.length(t, c); n != 2 {
		t.Fatalf("%d events after a resolved lost reply, want 2", n)
	}

	f.SetDown(true)
	rec := api.do(t, withKey(post(target, `{"kind":"a.c"}`), "k1"))
	wantStatus(t, rec, http.StatusServiceUnavailable)
	if rec.Header().Get("Retry-After") == "" || decode[errorBody](t, rec).Error.Code != nqd.CodeUnavailable {
		t.Errorf("Redis down: %v %s, want unavailable with Retry-After", rec.Header(), rec.Body)
	}
	f.SetDown(false)
	if n := api.length(t, c); n != 2 {
		t.Fatalf("%d events after a 503, want 2: a 503 stores nothing", n)
	}

	f.Arm(redistest.LoseReplyAndGoDown)
	rec = api.do(t, withKey(post(target, `{"kind":"a.c"}`), "k1"))
	wantStatus(t, rec, http.StatusGatewayTimeout)
	if rec.Header().Get("Retry-After") == "" || decode[errorBody](t, rec).Error.Code != nqd.CodeOutcomeUnknown {
		t.Errorf("lost and unresolved: %v %s, want outcome_unknown with Retry-After", rec.Header(), rec.Body)
	}
	f.SetDown(false)
	again := api.do(t, withKey(post(target, `{"kind":"a.c"}`), "k1"))
	wantStatus(t, again, http.StatusCreated)
	if again.Header().Get("Idempotent-Replayed") != "true" {
		t.Error("the retry did not find the append whose outcome was unknown")
	}
	if n := api.length(t, c); n != 3 {
		t.Errorf("%d events, want 3: the unknown append stored once", n)
	}
}
