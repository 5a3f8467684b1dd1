package wiring

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/config"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/s3test"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/store"
)

// startApp is mustStartApp that also hands out the App, for a test to reach
// its store.
func startApp(t *testing.T, cfg config.Config) (*App, string) {
	t.Helper()
	app, err := New(context.Background(), cfg, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Serve() }()
	t.Cleanup(func() {
		if err := app.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		if err := app.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return app, "http://" + app.Addr()
}

// TestArchiveSharedThroughABucket runs two servers, each with a store of its
// own, on one bucket of a real S3-compatible server: a run that expires on
// the first is read with source=archive and restored on the second.
func TestArchiveSharedThroughABucket(t *testing.T) {
	bucket := s3test.Start(t).Bucket(t, "runs")
	cfgA := testConfig(t)
	cfgA.ArchiveURL = bucket
	cfgA.RetainCompleted = time.Millisecond
	cfgA.RetentionInterval = time.Second
	appA, _ := startApp(t, cfgA)

	finished := time.Now().Add(-time.Minute).UnixMilli()
	meta := store.RunMeta{FlowName: "demo", RunID: "r1", Status: store.RunCompleted, StartedAt: finished, CompletedAt: finished}
	evs := []event.Event{
		{Kind: "flow.started", Subject: "r1", RunID: "r1", FlowName: "demo"},
		{Kind: "step.completed", Subject: "r1", RunID: "r1", FlowName: "demo", Step: "s", Attempt: 1, Data: []byte(`{"n":1}`)},
		{Kind: "flow.completed", Subject: "r1", RunID: "r1", FlowName: "demo"},
	}
	if _, err := appA.Store.UpdateRun(t.Context(), store.RunUpdate{Meta: meta, Events: evs}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, 20*time.Millisecond, "the run to expire on the first server", func() bool {
		info, err := appA.Store.Info(t.Context(), store.Context{Type: "flow", ID: "r1"})
		if err != nil {
			t.Fatal(err)
		}
		return info.Length == 0
	})

	cfgB := testConfig(t)
	cfgB.ArchiveURL = bucket
	_, baseB := startApp(t, cfgB)
	code, archived := do(t, "GET", baseB+"/api/_events/flow/r1?source=archive", "")
	if code != http.StatusOK || archived["eventCount"] != float64(3) {
		t.Fatalf("source=archive on the second server: got %d %v, want 3 events", code, archived)
	}
	code, body := do(t, "POST", baseB+"/api/_events/flow/r1/restore", "")
	if code != http.StatusCreated || body["eventCount"] != float64(3) || body["lastEventId"] != archived["lastEventId"] {
		t.Fatalf("restore on the second server: got %d %v, want 201 with the archived 3 events", code, body)
	}
	_, list := do(t, "GET", baseB+"/api/_events/flow/list?name=demo", "")
	if items, _ := list["items"].([]any); len(items) != 1 {
		t.Fatalf("runs of demo on the second server: got %v, want r1", list)
	}
}

// TestCompactIntoABucket compacts a run into a bucket of a real
// S3-compatible server: time travel before the trim answers as before, and
// the trimmed events read back through the bucket.
func TestCompactIntoABucket(t *testing.T) {
	cfg := testConfig(t)
	cfg.ArchiveURL = s3test.Start(t).Bucket(t, "segments")
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
	if code != http.StatusOK || res["trimmed"] != float64(15) {
		t.Fatalf("compact: got %d %v, want 200 trimming 15 events", code, res)
	}
	_, after := do(t, "GET", base+"/api/_events/flow/run-1/state?at="+idOf(4), "")
	if fmt.Sprint(after) != fmt.Sprint(early) {
		t.Errorf("state at %s after compaction:\n%v\nwant\n%v", idOf(4), after, early)
	}
	_, all := do(t, "GET", base+"/api/_events/flow/run-1?limit=20", "")
	if got, _ := all["events"].([]any); len(got) != 20 {
		t.Errorf("events after compaction: got %d, want all 20 through the bucket", len(got))
	}
}
