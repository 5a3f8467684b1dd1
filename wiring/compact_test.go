package wiring

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestCompactThroughWiring compacts a run through the real wiring on the
// embedded store: the early state still answers, read through the archive,
// and without NQ_ARCHIVE_DIR the route is off.
func TestCompactThroughWiring(t *testing.T) {
	cfg := testConfig(t)
	cfg.ArchiveDir = t.TempDir()
	base, _ := mustStartApp(t, cfg)

	var batch []string
	for i := range 20 {
		batch = append(batch, fmt.Sprintf(`{"kind":"step.log","data":{"n":%d}}`, i))
	}
	if code, body := do(t, "POST", base+"/api/_events/flow/run-1", `{"events":[`+strings.Join(batch, ",")+`]}`); code != http.StatusCreated {
		t.Fatalf("append: got %d %v", code, body)
	}
	_, page := do(t, "GET", base+"/api/_events/flow/run-1?limit=20", "")
	events, _ := page["events"].([]any)
	if len(events) != 20 {
		t.Fatalf("appended run: got %v, want 20 events", page)
	}
	idOf := func(i int) string { return events[i].(map[string]any)["id"].(string) }
	_, early := do(t, "GET", base+"/api/_events/flow/run-1/state?at="+idOf(4), "")

	code, res := do(t, "POST", base+"/api/_events/flow/run-1/compact?before="+idOf(15), "")
	if code != http.StatusOK || res["trimmed"] != float64(15) || res["checkpoint"] != idOf(14) {
		t.Fatalf("compact: got %d %v, want 200 trimming 15 events through %s", code, res, idOf(14))
	}
	_, after := do(t, "GET", base+"/api/_events/flow/run-1/state?at="+idOf(4), "")
	if fmt.Sprint(after) != fmt.Sprint(early) {
		t.Errorf("state at %s after compaction:\n%v\nwant\n%v", idOf(4), after, early)
	}
	if _, ctx := do(t, "GET", base+"/api/_events/flow/run-1", ""); ctx["eventCount"] != float64(5) {
		t.Errorf("eventCount after compaction: got %v, want the live 5", ctx["eventCount"])
	}

	plain := testConfig(t)
	plainBase, _ := mustStartApp(t, plain)
	if code, _ := do(t, "POST", plainBase+"/api/_events/flow/run-1/compact?before="+idOf(15), ""); code != http.StatusNotFound {
		t.Errorf("compact without an archive: got %d, want 404", code)
	}
}
