package config

import (
	"io"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoadDefaults(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Backend() != "embedded" || c.DataDir != "./data" || c.Prefix != "nq" || c.MaxBodyBytes != 1<<20 {
		t.Fatalf("unexpected defaults: %+v", c)
	}
}

func TestLoadPrecedence(t *testing.T) {
	c, err := Load([]string{"-request-timeout", "3s"},
		env(map[string]string{"NQ_REQUEST_TIMEOUT": "5s", "NQ_REDIS_URL": "redis://127.0.0.1:6379/0"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.RequestTimeout != 3*time.Second {
		t.Errorf("flag should win over env: got %s", c.RequestTimeout)
	}
	if c.Backend() != "redis" {
		t.Errorf("got backend %q, want redis", c.Backend())
	}
}

func TestLoadRejects(t *testing.T) {
	tests := []struct {
		env  map[string]string
		args []string
		want string
	}{
		{env: map[string]string{"NQ_MAX_BATCH": "many"}, want: "NQ_MAX_BATCH"},
		{env: map[string]string{"NQ_PREFIX": "nq:x"}, want: "NQ_PREFIX"},
		{env: map[string]string{"NQ_REDIS_URL": "http://x"}, want: "NQ_REDIS_URL"},
		{env: map[string]string{"NQ_LOG_LEVEL": "loud"}, want: "NQ_LOG_LEVEL"},
		{env: map[string]string{"NQ_ADDR": "8080"}, want: "NQ_ADDR"},
		{args: []string{"-request-timeout", "soon"}, want: "-request-timeout"},
		{env: map[string]string{"NQ_MAX_BODY_BYTES": "1"}, want: "NQ_MAX_BODY_BYTES"},
		{env: map[string]string{"NQ_CORS_ORIGINS": "https://ok.example, ui.example"}, want: "NQ_CORS_ORIGINS"},
		{env: map[string]string{"NQ_SSE_HEARTBEAT": "5m"}, want: "NQ_SSE_HEARTBEAT"},
	}
	for _, tt := range tests {
		_, err := Load(tt.args, env(tt.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Load(%v, %v) = %v, want a one-line error naming %s", tt.args, tt.env, err, tt.want)
		}
	}
}
