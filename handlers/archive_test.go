package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/store"
)

// withArchive gives the API the archive in dir.
func withArchive(t testing.TB, dir string) func(*handlers.Deps) {
	return func(d *handlers.Deps) {
		a, err := archive.NewDir(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		d.Archive = a
	}
}

// archiveQueries are the reads an archived run must answer as it did live:
// the newest view, pages, time travel on every route and diffs.
var archiveQueries = []string{
	"/api/_events/flow/abc-123",
	"/api/_events/flow/abc-123?limit=4",
	"/api/_events/flow/abc-123?fromId=1762336803000-2&limit=3",
	"/api/_events/flow/abc-123?at=2025-11-05T10:00:03Z",
	"/api/_events/flow/abc-123?at=2025-11-05T10:00:03Z&fromId=1762336801000-0&limit=2",
	"/api/_events/flow/abc-123?at=2025-11-05T09:59:59Z",
	"/api/_events/flow/abc-123/state",
	"/api/_events/flow/abc-123/state?at=1762336803000-2",
	"/api/_events/flow/abc-123/state?at=2025-11-05T09:59:59Z",
	"/api/_events/flow/abc-123/state/diff",
	"/api/_events/flow/abc-123/state/diff?from=2025-11-05T10:00:03Z&to=2025-11-05T10:00:10Z",
}

// archiveTrainingRun stores the ml-training run live on one server, archives it
// into dir, and returns that server's answers to archiveQueries.
func archiveTrainingRun(t *testing.T, dir string) map[string]string {
	t.Helper()
	sc := loadTrainingScenario(t)
	live := newTestAPI(t, withState(t))
	for _, e := range sc.events {
		live.clock.Set(e.at)
		wantStatus(t, live.do(t, post("/api/_events/flow/abc-123", e.body)), http.StatusCreated)
	}
	answers := map[string]string{}
	for _, q := range archiveQueries {
		rec := live.do(t, get(q))
		wantStatus(t, rec, http.StatusOK)
		answers[q] = rec.Body.String()
	}

	c := store.Context{Type: "flow", ID: "abc-123"}
	evs, err := live.store.Range(context.Background(), c, store.RangeQuery{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := archive.NewDir(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Put(context.Background(), c, nil, archive.Slice(evs)); err != nil {
		t.Fatal(err)
	}
	return answers
}

// TestArchivedRunReadsAsLive reads an archived run from a server whose store
// never held it: events, states and time travel answer exactly as the live
// server did.
func TestArchivedRunReadsAsLive(t *testing.T) {
	dir := t.TempDir()
	want := archiveTrainingRun(t, dir)
	api := newTestAPI(t, withState(t), withArchive(t, dir))

	for _, q := range archiveQueries {
		sep := "?"
		if strings.Contains(q, "?") {
			sep = "&"
		}
		rec := api.do(t, get(q+sep+"source=archive"))
		wantStatus(t, rec, http.StatusOK)
		jsonCmp(t, q, want[q], rec.Body.Bytes())
	}

	// The live source of this server does not hold the run: the answers
	// above came from the archive.
	rec := api.do(t, get("/api/_events/flow/abc-123?source=live"))
	wantStatus(t, rec, http.StatusOK)
	if n := decode[struct{ EventCount int }](t, rec).EventCount; n != 0 {
		t.Fatalf("live eventCount %d, want 0", n)
	}
}

// TestCorruptArchiveIsDetected changes one byte of an archived run: every
// route answers 502 archive_corrupt instead of wrong events or states.
func TestCorruptArchiveIsDetected(t *testing.T) {
	dir := t.TempDir()
	archiveTrainingRun(t, dir)
	path := filepath.Join(dir, "flow", "abc-123.ndjson.gz")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0x01
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}

	api := newTestAPI(t, withState(t), withArchive(t, dir))
	for _, q := range []string{
		"/api/_events/flow/abc-123?source=archive",
		"/api/_events/flow/abc-123?source=archive&at=1762336803000-2",
		"/api/_events/flow/abc-123/state?source=archive",
		"/api/_events/flow/abc-123/state/diff?source=archive",
	} {
		rec := api.do(t, get(q))
		wantStatus(t, rec, http.StatusBadGateway)
		if code := decode[errorBody](t, rec).Error.Code; code != nqd.CodeArchiveCorrupt {
			t.Errorf("%s: code %q, want %q", q, code, nqd.CodeArchiveCorrupt)
		}
	}
}

// TestArchiveSourceErrors covers what source=archive cannot answer.
func TestArchiveSourceErrors(t *testing.T) {
	api := newTestAPI(t, withState(t), withArchive(t, t.TempDir()))
	rec := api.do(t, get("/api/_events/flow/never-archived?source=archive"))
	wantStatus(t, rec, http.StatusNotFound)

	rec = api.do(t, get("/api/_events/flow/abc-123/state?source=attic"))
	wantStatus(t, rec, http.StatusBadRequest)
	if f := decode[errorBody](t, rec).Error.Fields["source"]; f == "" {
		t.Errorf("400 names no source field: %s", rec.Body)
	}

	bare := newTestAPI(t, withState(t))
	rec = bare.do(t, get("/api/_events/flow/abc-123?source=archive"))
	wantStatus(t, rec, http.StatusNotFound)
	var body errorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error.Message == "" {
		t.Fatalf("404 without a message: %s", rec.Body)
	}
}
