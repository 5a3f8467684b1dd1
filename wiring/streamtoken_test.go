package wiring

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/internal/pgtest"
	"github.com/nqd-dev/nqd/internal/redistest"
)

// TestStreamTokensAcrossInstances: with API tokens and no
// NQ_STREAM_TOKEN_KEYS on a shared store, a stream token one instance
// issued opens a stream on another, and on a restarted one.
func TestStreamTokensAcrossInstances(t *testing.T) {
	secret := strings.Repeat("r", 40)
	toks, err := auth.ParseTokens("ui:read:" + secret)
	if err != nil {
		t.Fatal(err)
	}
	for _, backend := range []string{"redis", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Tokens = toks
			switch backend {
			case "redis":
				cfg.RedisURL, cfg.Prefix = "redis://"+redistest.Addr(t)+"/0", redistest.Prefix(t)
			case "postgres":
				cfg.PostgresURL = pgtest.URL(t)
			}
			one, stopOne := mustStartApp(t, cfg)
			two, _ := mustStartApp(t, cfg)

			req, _ := http.NewRequest(http.MethodPost, one+"/api/_auth/stream-token", strings.NewReader(`{"type":"flow","id":"run-1"}`))
			req.Header.Set("Authorization", "Bearer "+secret)
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body struct{ Token string }
			_ = json.NewDecoder(res.Body).Decode(&body)
			res.Body.Close()
			if res.StatusCode != http.StatusCreated || body.Token == "" {
				t.Fatalf("issue a stream token: %d %+v", res.StatusCode, body)
			}

			open := func(base string) int {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/_events/flow/run-1/stream?access_token="+body.Token, nil)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				return res.StatusCode
			}
			if code := open(two); code != http.StatusOK {
				t.Errorf("the stream on the other instance: %d, want 200", code)
			}
			stopOne()
			restarted, _ := mustStartApp(t, cfg)
			if code := open(restarted); code != http.StatusOK {
				t.Errorf("the stream on a restarted instance: %d, want 200", code)
			}
		})
	}
}
