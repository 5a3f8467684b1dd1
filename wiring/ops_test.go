package wiring

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// TestAddrInUseBeforeStore: a listen address that is taken fails New,
// naming the setting, before the embedded store is created.
func TestAddrInUseBeforeStore(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := testConfig(t)
	cfg.Addr = taken.Addr().String()
	_, err = New(context.Background(), cfg, zerolog.Nop())
	if err == nil || !strings.HasPrefix(err.Error(), "NQ_ADDR: listen on "+cfg.Addr) {
		t.Fatalf("New on a taken address: %v, want an NQ_ADDR error", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "nqd.db")); !os.IsNotExist(err) {
		t.Errorf("the store was opened before the address was bound: stat nqd.db: %v", err)
	}
}

// TestHealthcheck: the probe passes against a serving nqd, also when its
// address names every interface, and fails when nothing listens.
func TestHealthcheck(t *testing.T) {
	cfg := testConfig(t)
	base, stop := mustStartApp(t, cfg)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
	probe := cfg
	for _, host := range []string{"127.0.0.1", "0.0.0.0", ""} {
		probe.Addr = net.JoinHostPort(host, port)
		if err := Healthcheck(context.Background(), probe); err != nil {
			t.Errorf("healthcheck of %s: %v", probe.Addr, err)
		}
	}
	stop()
	probe.Addr = "127.0.0.1:" + port
	if err := Healthcheck(context.Background(), probe); err == nil {
		t.Error("healthcheck of a stopped nqd passed")
	}
}

// TestRedisLog: go-redis's lines become JSON lines at debug, tagged with
// their component; a recovered panic is an error.
func TestRedisLog(t *testing.T) {
	var buf bytes.Buffer
	l := redisLog{zerolog.New(&buf).With().Str("component", "go-redis").Logger()}
	l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v\n", 5, "connection refused")
	l.Printf(context.Background(), "autopipeline: recovered full-duplex hook panic: %v", "boom")
	var got []map[string]any
	for s := range strings.Lines(buf.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("not a JSON line: %q", s)
		}
		got = append(got, m)
	}
	if len(got) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(got), buf.String())
	}
	if got[0]["level"] != "debug" || got[0]["component"] != "go-redis" ||
		got[0]["message"] != "redis: connection pool: failed to dial after 5 attempts: connection refused" {
		t.Errorf("dial failure logged as %v", got[0])
	}
	if got[1]["level"] != "error" {
		t.Errorf("recovered panic logged as %v", got[1])
	}
}
