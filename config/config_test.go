package config

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/internal/gcfloor"
	"github.com/nqd-dev/nqd/registry"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoadDefaults(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Backend() != "embedded" || c.DataDir != "./data" || c.Prefix != "nq" || c.MaxBodyBytes != 1<<20 ||
		c.GCMinHeap != gcfloor.DefaultFloor {
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

func TestLoadPostgres(t *testing.T) {
	c, err := Load(nil, env(map[string]string{"NQ_POSTGRES_URL": "postgres://nqd@db.example/nqd?sslmode=verify-full"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Backend() != "postgres" {
		t.Errorf("got backend %q, want postgres", c.Backend())
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
		{env: map[string]string{"NQ_POSTGRES_URL": "mysql://x"}, want: "NQ_POSTGRES_URL"},
		{env: map[string]string{"NQ_REDIS_URL": "redis://x", "NQ_POSTGRES_URL": "postgres://x/db"}, want: "NQ_REDIS_URL and NQ_POSTGRES_URL"},
		{env: map[string]string{"NQ_LOG_LEVEL": "loud"}, want: "NQ_LOG_LEVEL"},
		{env: map[string]string{"NQ_ADDR": "8080"}, want: "NQ_ADDR"},
		{args: []string{"-request-timeout", "soon"}, want: "-request-timeout"},
		{env: map[string]string{"NQ_MAX_BODY_BYTES": "1"}, want: "NQ_MAX_BODY_BYTES"},
		{env: map[string]string{"NQ_CORS_ORIGINS": "https://ok.example, ui.example"}, want: "NQ_CORS_ORIGINS"},
		{env: map[string]string{"NQ_CORS_ORIGINS": "https://ok.example/path"}, want: "NQ_CORS_ORIGINS"},
		{env: map[string]string{"NQ_ALLOWED_HOSTS": "nqd.example:8080"}, want: "NQ_ALLOWED_HOSTS"},
		{env: map[string]string{"NQ_TRUSTED_PROXIES": "10.0.0.0/8, nginx"}, want: "NQ_TRUSTED_PROXIES"},
		{env: map[string]string{"NQ_ALLOWED_HOSTS": "https://nqd.example"}, want: "NQ_ALLOWED_HOSTS"},
		{env: map[string]string{"NQ_SSE_HEARTBEAT": "5m"}, want: "NQ_SSE_HEARTBEAT"},
		{env: map[string]string{"NQ_STREAM_MAXLEN_BY_TYPE": "flow=10,Bad=3"}, want: "NQ_STREAM_MAXLEN_BY_TYPE"},
		{env: map[string]string{"NQ_STREAM_MAXLEN_BY_TYPE": "flow"}, want: "NQ_STREAM_MAXLEN_BY_TYPE"},
		{env: map[string]string{"NQ_GC_MIN_HEAP": "-1"}, want: "NQ_GC_MIN_HEAP"},
		{env: map[string]string{"NQ_UI_UPSTREAM": "127.0.0.1:3000"}, want: "NQ_UI_UPSTREAM"},
		{env: map[string]string{"NQ_UI_UPSTREAM": "ws://127.0.0.1:3000"}, want: "NQ_UI_UPSTREAM"},
		{env: map[string]string{"NQ_UI_UPSTREAM": "http://127.0.0.1:3000/app"}, want: "NQ_UI_UPSTREAM"},
		{env: map[string]string{"NQ_ARCHIVE_URL": "gs://bucket"}, want: "NQ_ARCHIVE_URL"},
		{env: map[string]string{"NQ_LARGE_DATA_BYTES": "300000"}, want: "NQ_LARGE_DATA_BYTES"},
		{env: map[string]string{"NQ_ARCHIVE_URL": "s3://?region=eu-west-1"}, want: "NQ_ARCHIVE_URL"},
		{env: map[string]string{"NQ_ARCHIVE_URL": "s3://runs", "NQ_ARCHIVE_DIR": "/var/lib/nqd/archive"}, want: "NQ_ARCHIVE_DIR and NQ_ARCHIVE_URL"},
	}
	for _, tt := range tests {
		_, err := Load(tt.args, env(tt.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Load(%v, %v) = %v, want a one-line error naming %s", tt.args, tt.env, err, tt.want)
		}
	}
}

const testSecret = "s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t"

func TestLoadAccess(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("# workers\nworker:write:"+auth.Hash("w-"+testSecret)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load([]string{"-addr", "0.0.0.0:8080"}, env(map[string]string{
		"NQ_TOKENS":                 "ui:read:" + testSecret,
		"NQ_TOKENS_FILE":            file,
		"NQ_STREAM_TOKEN_KEYS":      "k2:" + testSecret + ",k1:" + testSecret,
		"NQ_RATE_PER_TOKEN":         "50/10s",
		"NQ_RATE_PER_ADDR":          "0",
		"NQ_MAX_STREAMS_PER_CLIENT": "3",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tok := range c.Tokens {
		names = append(names, tok.Name+":"+tok.Scope.String())
	}
	if got := strings.Join(names, ","); got != "ui:read,worker:write" {
		t.Errorf("tokens %s, want ui:read,worker:write", got)
	}
	if len(c.StreamTokenKeys) != 2 || c.StreamTokenKeys[0].ID != "k2" {
		t.Errorf("stream keys %+v, want k2 first", c.StreamTokenKeys)
	}
	if c.RatePerToken != (Rate{50, 10 * time.Second}) || c.RatePerAddr != (Rate{}) || c.MaxStreamsPerClient != 3 {
		t.Errorf("limits %+v %+v %d", c.RatePerToken, c.RatePerAddr, c.MaxStreamsPerClient)
	}
	secretBytes := strings.Trim(fmt.Sprint([]byte(testSecret[:8])), "[]")
	for _, verb := range []string{"%v", "%+v", "%#v"} {
		if printed := fmt.Sprintf(verb, c); strings.Contains(printed, testSecret) || strings.Contains(printed, secretBytes) {
			t.Errorf("Config printed with %s shows a secret: %s", verb, printed)
		}
	}
}

func TestLoopbackWithoutTokens(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:8080", "localhost:8080", "[::1]:8080"} {
		if _, err := Load([]string{"-addr", addr}, env(nil), io.Discard); err != nil {
			t.Errorf("open on %s: %v", addr, err)
		}
	}
	for _, addr := range []string{":8080", "0.0.0.0:8080", "192.0.2.1:8080"} {
		if _, err := Load([]string{"-addr", addr}, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "NQ_ALLOW_INSECURE_BIND") {
			t.Errorf("open on %s: %v, want a refusal naming NQ_ALLOW_INSECURE_BIND", addr, err)
		}
		if _, err := Load([]string{"-addr", addr}, env(map[string]string{"NQ_ALLOW_INSECURE_BIND": "1"}), io.Discard); err != nil {
			t.Errorf("open on %s with the opt-in: %v", addr, err)
		}
	}
}

func TestLoadRejectsAccess(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"NQ_TOKENS": "ui:read:short"}, "NQ_TOKENS"},
		{map[string]string{"NQ_TOKENS": "ui:root:" + testSecret}, "NQ_TOKENS"},
		{map[string]string{"NQ_TOKENS_FILE": "/nonexistent/tokens"}, "NQ_TOKENS_FILE"},
		{map[string]string{"NQ_STREAM_TOKEN_KEYS": "k1:short"}, "NQ_STREAM_TOKEN_KEYS"},
		{map[string]string{"NQ_RATE_PER_TOKEN": "lots"}, "NQ_RATE_PER_TOKEN"},
		{map[string]string{"NQ_RATE_PER_ADDR": "10/1ms"}, "NQ_RATE_PER_ADDR"},
		{map[string]string{"NQ_MAX_EVENT_BYTES": "2000000"}, "NQ_MAX_EVENT_BYTES"},
		{map[string]string{"NQ_MAX_STREAMS_PER_CLIENT": "-1"}, "NQ_MAX_STREAMS_PER_CLIENT"},
		{map[string]string{"NQ_ALLOW_INSECURE_BIND": "sure"}, "NQ_ALLOW_INSECURE_BIND"},
		{map[string]string{"NQ_STREAM_TOKEN_MAX_TTL": "1s"}, "NQ_STREAM_TOKEN_MAX_TTL"},
	}
	for _, tt := range tests {
		_, err := Load(nil, env(tt.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), testSecret) {
			t.Errorf("Load(%v) = %v, want an error naming %s and no secret", tt.env, err, tt.want)
		}
	}
}

func TestLoadSweeper(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.SweepInterval != 30*time.Second || c.StallAfter != 5*time.Minute {
		t.Errorf("sweeper defaults = %s, %s; want 30s, 5m", c.SweepInterval, c.StallAfter)
	}
	c, err = Load([]string{"-stall-after", "90s"}, env(map[string]string{"NQ_SWEEP_INTERVAL": "5s"}), io.Discard)
	if err != nil || c.SweepInterval != 5*time.Second || c.StallAfter != 90*time.Second {
		t.Errorf("Load = %s, %s, %v; want 5s, 90s", c.SweepInterval, c.StallAfter, err)
	}
	for _, name := range []string{"NQ_SWEEP_INTERVAL", "NQ_STALL_AFTER"} {
		if _, err := Load(nil, env(map[string]string{name: "10ms"}), io.Discard); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=10ms: err = %v, want it named", name, err)
		}
	}
}

func TestLoadJobLease(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil || c.JobLease != 30*time.Second {
		t.Errorf("default job lease = %s, %v; want 30s", c.JobLease, err)
	}
	c, err = Load([]string{"-job-lease", "2m"}, env(map[string]string{"NQ_JOB_LEASE": "5s"}), io.Discard)
	if err != nil || c.JobLease != 2*time.Minute {
		t.Errorf("flag over env = %s, %v; want 2m", c.JobLease, err)
	}
	if _, err := Load(nil, env(map[string]string{"NQ_JOB_LEASE": "500ms"}), io.Discard); err == nil || !strings.Contains(err.Error(), "NQ_JOB_LEASE") {
		t.Errorf("NQ_JOB_LEASE=500ms: err = %v, want it named", err)
	}
}

func TestLoadWorkerRegistry(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil || c.WorkerHeartbeat != registry.DefaultInterval || c.WorkerLostAfter != registry.DefaultLostAfter || c.WorkerRetain != registry.DefaultRetain {
		t.Errorf("defaults = %s, %s, %s, %v; want the registry's", c.WorkerHeartbeat, c.WorkerLostAfter, c.WorkerRetain, err)
	}
	c, err = Load([]string{"-worker-lost-after", "2m"}, env(map[string]string{"NQ_WORKER_HEARTBEAT": "5s", "NQ_WORKER_LOST_AFTER": "40s", "NQ_WORKER_RETAIN": "10m"}), io.Discard)
	if err != nil || c.WorkerHeartbeat != 5*time.Second || c.WorkerLostAfter != 2*time.Minute || c.WorkerRetain != 10*time.Minute {
		t.Errorf("Load = %s, %s, %s, %v; want 5s, 2m, 10m", c.WorkerHeartbeat, c.WorkerLostAfter, c.WorkerRetain, err)
	}
	for _, tc := range []struct {
		env  map[string]string
		name string
	}{
		{map[string]string{"NQ_WORKER_HEARTBEAT": "100ms"}, "NQ_WORKER_HEARTBEAT"},
		// Not above the heartbeat plus a claim's 30s wait: live workers would be lost.
		{map[string]string{"NQ_WORKER_LOST_AFTER": "10s"}, "NQ_WORKER_LOST_AFTER"},
		{map[string]string{"NQ_WORKER_LOST_AFTER": "45s"}, "NQ_WORKER_LOST_AFTER"},
		{map[string]string{"NQ_WORKER_HEARTBEAT": "1m"}, "NQ_WORKER_LOST_AFTER"},
		// Shorter than lost plus heartbeat: a connected worker's events would be trimmed.
		{map[string]string{"NQ_WORKER_RETAIN": "70s"}, "NQ_WORKER_RETAIN"},
	} {
		if _, err := Load(nil, env(tc.env), io.Discard); err == nil || !strings.Contains(err.Error(), tc.name+":") {
			t.Errorf("%v: err = %v, want %s named", tc.env, err, tc.name)
		}
	}
	if _, err := Load(nil, env(map[string]string{"NQ_WORKER_LOST_AFTER": "46s", "NQ_WORKER_RETAIN": "61s"}), io.Discard); err != nil {
		t.Errorf("lost just above heartbeat plus claim wait, retain at stale: %v", err)
	}
}

func TestStreamMaxLenByType(t *testing.T) {
	c, err := Load(nil, env(map[string]string{"NQ_STREAM_MAXLEN_BY_TYPE": "flow=100000, trigger=1000"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.StreamMaxLenByType["flow"] != 100000 || c.StreamMaxLenByType["trigger"] != 1000 || len(c.StreamMaxLenByType) != 2 {
		t.Fatalf("StreamMaxLenByType = %v", c.StreamMaxLenByType)
	}
}

func TestLoadRejectsBadAddrAndFlowsDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "flow.yaml")
	if err := os.WriteFile(file, []byte("entry: a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"NQ_ADDR": "127.0.0.1:99999"}, `NQ_ADDR: want a port number from 0 to 65535, got "99999"`},
		{map[string]string{"NQ_ADDR": "127.0.0.1:http"}, `NQ_ADDR: want a port number`},
		{map[string]string{"NQ_ADDR": "127.0.0.1:-1"}, `NQ_ADDR: want a port number`},
		{map[string]string{"NQ_FLOWS_DIR": filepath.Join(t.TempDir(), "missing")}, "NQ_FLOWS_DIR: "},
		{map[string]string{"NQ_FLOWS_DIR": file}, "NQ_FLOWS_DIR: " + file + " is not a directory"},
	} {
		_, err := Load(nil, env(tt.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Load(%v) = %v, want an error containing %q", tt.env, err, tt.want)
		}
	}
	if _, err := Load(nil, env(map[string]string{"NQ_ADDR": "127.0.0.1:0"}), io.Discard); err != nil {
		t.Errorf("port 0 (any free port): %v", err)
	}
}

// TestVersionFlag: -version is honoured even when a setting is wrong, so a
// user can always learn which binary they run.
func TestVersionFlag(t *testing.T) {
	c, err := Load([]string{"-version"}, env(map[string]string{"NQ_MAX_BATCH": "many"}), io.Discard)
	if err != nil || !c.Version {
		t.Fatalf("Load(-version) = %+v, %v; want Version and no error", c.Version, err)
	}
	if _, err := Load(nil, env(map[string]string{"NQ_MAX_BATCH": "many"}), io.Discard); err == nil {
		t.Fatal("a wrong setting without -version: no error")
	}
}

// TestUsageText: the flag package takes a back-quoted word in a usage text
// for the argument's name, so usage texts must hold no backquotes.
func TestUsageText(t *testing.T) {
	var out strings.Builder
	if _, err := Load([]string{"-h"}, env(nil), &out); err == nil {
		t.Fatal("-h: no flag.ErrHelp")
	}
	if !strings.Contains(out.String(), "-sse-max-backfill value") || strings.Contains(out.String(), "`") {
		t.Errorf("-h text shows a backquoted word or a wrong argument name:\n%s", out.String())
	}
	for _, f := range []string{"-version", "-healthcheck"} {
		if !strings.Contains(out.String(), f+"\n") {
			t.Errorf("-h text lacks %s", f)
		}
	}
}

func TestCheckHost(t *testing.T) {
	tokens := "ui:read:" + testSecret
	for _, tt := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, true}, // the default loopback address
		{map[string]string{"NQ_ADDR": "[::1]:8080"}, true},
		{map[string]string{"NQ_ALLOWED_HOSTS": "*"}, false},
		{map[string]string{"NQ_ADDR": "0.0.0.0:8080", "NQ_TOKENS": tokens}, false},
		{map[string]string{"NQ_ADDR": "0.0.0.0:8080", "NQ_TOKENS": tokens, "NQ_ALLOWED_HOSTS": "nqd.example"}, true},
	} {
		c, err := Load(nil, env(tt.env), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.CheckHost(); got != tt.want {
			t.Errorf("%v: CheckHost() = %v, want %v", tt.env, got, tt.want)
		}
		if tt.env["NQ_ALLOWED_HOSTS"] == "nqd.example" && !slices.Contains(c.ServedHosts(), "nqd.example") {
			t.Errorf("ServedHosts() = %v, want NQ_ALLOWED_HOSTS in it", c.ServedHosts())
		}
	}
}

func TestTrustedProxies(t *testing.T) {
	c, err := Load(nil, env(map[string]string{"NQ_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.7,2001:db8::/32, 10.1.2.3/16"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range c.TrustedProxies {
		got = append(got, p.String())
	}
	if want := "10.0.0.0/8 192.0.2.7/32 2001:db8::/32 10.1.0.0/16"; strings.Join(got, " ") != want {
		t.Errorf("TrustedProxies = %v, want %s", got, want)
	}
	if c, _ := Load(nil, env(nil), io.Discard); len(c.TrustedProxies) != 0 {
		t.Errorf("default TrustedProxies = %v, want none", c.TrustedProxies)
	}
}

func TestServedHostsHoldTheListenName(t *testing.T) {
	c, err := Load(nil, env(map[string]string{"NQ_ADDR": "nqd.internal:8080", "NQ_TOKENS": "ui:read:" + testSecret, "NQ_ALLOWED_HOSTS": "a.example"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ServedHosts(); !slices.Equal(got, []string{"a.example", "nqd.internal"}) {
		t.Errorf("ServedHosts() = %v, want the allowed hosts and the listen name", got)
	}
}
