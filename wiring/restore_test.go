package wiring

import (
	"net/http"
	"testing"

	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/store"
)

// TestRestoreThroughWiring restores an archived run on each backend through
// the real wiring: the run reads back with its ids and is listed again.
func TestRestoreThroughWiring(t *testing.T) {
	for _, backend := range []string{"embedded", "redis"} {
		t.Run(backend, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.ArchiveDir = t.TempDir()
			if backend == "redis" {
				cfg.RedisURL = "redis://" + redistest.Addr(t) + "/0"
				cfg.Prefix = redistest.Prefix(t)
			}
			arch, err := archive.NewDir(cfg.ArchiveDir, nil)
			if err != nil {
				t.Fatal(err)
			}
			evs := []event.Event{
				{ID: event.ID{MS: 1762336800000}, Kind: "flow.started", FlowName: "demo"},
				{ID: event.ID{MS: 1762336801000, Seq: 3}, Kind: "flow.completed"},
			}
			if _, err := arch.Put(t.Context(), store.Context{Type: "flow", ID: "run-1"}, nil, archive.Slice(evs)); err != nil {
				t.Fatal(err)
			}
			base, _ := mustStartApp(t, cfg)

			code, body := do(t, "POST", base+"/api/_events/flow/run-1/restore", "")
			if code != http.StatusCreated || body["lastEventId"] != "1762336801000-3" || body["eventCount"] != float64(2) {
				t.Fatalf("restore: got %d %v, want 201 with 2 events up to 1762336801000-3", code, body)
			}
			code, ctx := do(t, "GET", base+"/api/_events/flow/run-1", "")
			if code != http.StatusOK || ctx["lastEventId"] != "1762336801000-3" || ctx["eventCount"] != float64(2) {
				t.Fatalf("restored run: got %d %v", code, ctx)
			}
			_, list := do(t, "GET", base+"/api/_events/flow/list?name=demo", "")
			if items, _ := list["items"].([]any); len(items) != 1 {
				t.Fatalf("runs of demo after restore: got %v, want run-1", list)
			}
			if code, _ := do(t, "POST", base+"/api/_events/flow/run-1/restore", ""); code != http.StatusConflict {
				t.Fatalf("second restore: got %d, want 409", code)
			}
		})
	}
}
