package wiring

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestTriggerKeyPersistsOnTheEmbeddedStore: a trigger id handed out before a
// restart still verifies after it, with no key configured.
func TestTriggerKeyPersistsOnTheEmbeddedStore(t *testing.T) {
	cfg := testConfig(t)
	first, err := TriggerSigner(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	id := first.Issue("run-1/approve", now.Add(time.Hour))

	again, err := TriggerSigner(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Verify(id, now); err != nil {
		t.Fatalf("a trigger id from before the restart: %v", err)
	}
	st, err := os.Stat(filepath.Join(cfg.DataDir, triggerKeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
}

// TestTriggerKeyIsPerProcessOnRedisWithoutKeys documents the fallback: with
// no NQ_TRIGGER_KEYS on Redis, ids do not survive a new signer.
func TestTriggerKeyIsPerProcessOnRedisWithoutKeys(t *testing.T) {
	cfg := testConfig(t)
	cfg.RedisURL = "redis://127.0.0.1:1/0"
	a, _ := TriggerSigner(cfg, zerolog.Nop())
	b, _ := TriggerSigner(cfg, zerolog.Nop())
	now := time.Now()
	if _, err := b.Verify(a.Issue("x", now.Add(time.Hour)), now); err == nil {
		t.Fatal("two process keys verified each other's ids")
	}
}
