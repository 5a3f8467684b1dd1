package wiring

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/internal/pgtest"
	"github.com/nqd-dev/nqd/internal/redistest"
)

// TestTriggerKeyPersistsOnTheEmbeddedStore: a trigger id handed out before a
// restart still verifies after it, with no key configured.
func TestTriggerKeyPersistsOnTheEmbeddedStore(t *testing.T) {
	cfg := testConfig(t)
	first, err := TriggerSigner(t.Context(), cfg, dirSecrets(cfg.DataDir))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	id := first.Issue("run-1/approve", now.Add(time.Hour))
	if !strings.HasPrefix(id, "tg1.local.") {
		t.Errorf("trigger id %s, want the embedded store's key id local", id)
	}

	again, err := TriggerSigner(t.Context(), cfg, dirSecrets(cfg.DataDir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Verify(id, now); err != nil {
		t.Fatalf("a trigger id from before the restart: %v", err)
	}
	st, err := os.Stat(filepath.Join(cfg.DataDir, "trigger.key"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
}

// TestTriggerKeysOverrideTheKeptKey: configured keys sign, and the store is
// not asked for one.
func TestTriggerKeysOverrideTheKeptKey(t *testing.T) {
	cfg := testConfig(t)
	keys, err := auth.ParseKeys("k1:" + strings.Repeat("s", auth.MinKeyLen))
	if err != nil {
		t.Fatal(err)
	}
	cfg.TriggerKeys = keys
	s, err := TriggerSigner(t.Context(), cfg, dirSecrets(cfg.DataDir))
	if err != nil {
		t.Fatal(err)
	}
	if id := s.Issue("x", time.Now().Add(time.Hour)); !strings.HasPrefix(id, "tg1.k1.") {
		t.Errorf("trigger id %s, want it signed with k1", id)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "trigger.key")); err == nil {
		t.Error("a trigger key was made although NQ_TRIGGER_KEYS is set")
	}
}

// TestTriggersAcrossInstancesAndRestarts: with no NQ_TRIGGER_KEYS on a shared
// store, a trigger handed out by one instance fires on another, and one
// pending across a restart fires on the restarted instance.
func TestTriggersAcrossInstancesAndRestarts(t *testing.T) {
	for _, backend := range []string{"redis", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			cfg := testConfig(t)
			switch backend {
			case "redis":
				cfg.RedisURL, cfg.Prefix = "redis://"+redistest.Addr(t)+"/0", redistest.Prefix(t)
			case "postgres":
				cfg.PostgresURL = pgtest.URL(t)
			}
			one, stopOne := mustStartApp(t, cfg)
			two, _ := mustStartApp(t, cfg)
			if code, body := do(t, "PUT", one+"/api/_flows/approval", approvalFlow); code >= 300 {
				t.Fatalf("store the flow: %d %v", code, body)
			}

			id := awaitTrigger(t, one)
			if !strings.HasPrefix(id, "tg1.store.") {
				t.Errorf("trigger id %s, want the store's key id", id)
			}
			if code, body := do(t, "POST", two+"/api/_flows/triggers/"+id, `{"approved":true}`); code != http.StatusOK {
				t.Fatalf("fire on the other instance: %d %v", code, body)
			}

			pending := awaitTrigger(t, one)
			stopOne()
			restarted, _ := mustStartApp(t, cfg)
			if code, body := do(t, "POST", restarted+"/api/_flows/triggers/"+pending, `{"approved":true}`); code != http.StatusOK {
				t.Fatalf("fire after a restart: %d %v", code, body)
			}
		})
	}
}

// approvalFlow's first step waits for a trigger.
const approvalFlow = `{"name":"approval","entry":"approve","steps":{"approve":{"queue":"q1","await":{"type":"trigger","timeout":600000}}}}`

// awaitTrigger starts a run of approvalFlow on base and returns the trigger
// its first step awaits.
func awaitTrigger(t *testing.T, base string) string {
	t.Helper()
	code, started := do(t, "POST", base+"/api/_flows/approval/start", `{}`)
	run, _ := started["flowId"].(string)
	if code != http.StatusOK || run == "" {
		t.Fatalf("start: %d %v", code, started)
	}
	_, got := do(t, "GET", base+"/api/_events/flow/"+run, "")
	evs, _ := got["events"].([]any)
	for _, e := range evs {
		ev, _ := e.(map[string]any)
		data, _ := ev["data"].(map[string]any)
		if id, _ := data["triggerId"].(string); ev["kind"] == "step.await.trigger" && id != "" {
			return id
		}
	}
	t.Fatalf("run %s awaits no trigger: %v", run, got)
	return ""
}
