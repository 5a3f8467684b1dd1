package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/store"
)

// withRestorer lets the API restore into its own store.
func withRestorer(t testing.TB) func(*handlers.Deps) {
	return func(d *handlers.Deps) {
		r, ok := d.Store.(handlers.Restorer)
		if !ok {
			t.Fatalf("%T cannot restore", d.Store)
		}
		d.Restorer = r
	}
}

// restoreAnswer is the restore route's answer.
type restoreAnswer struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	EventCount  int    `json:"eventCount"`
	LastEventID string `json:"lastEventId"`
}

// archiveTrainingRunWithRecord archives the ml-training example run into dir
// as archiveTrainingRun does, with a run record, and returns the live
// answers, the archived events and the record.
func archiveTrainingRunWithRecord(t *testing.T, dir string) (map[string]string, store.RunMeta) {
	t.Helper()
	answers := archiveTrainingRun(t, dir)
	a, err := archive.NewDir(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := store.Context{Type: "flow", ID: "abc-123"}
	_, evs, err := a.Get(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1].ID
	record := store.RunMeta{FlowName: "seedflow", RunID: c.ID, Status: store.RunCompleted, StartedAt: int64(evs[0].ID.MS),
		CompletedAt: int64(last.MS), StepCount: 2, CompletedSteps: 2, Version: 7}
	raw, err := json.Marshal(record)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Put(context.Background(), c, raw, archive.Slice(evs)); err != nil {
		t.Fatal(err)
	}
	return answers, record
}

// TestRestoreBringsArchivedRunBack restores the ml-training run into a store
// that never held it: it then reads live exactly as it did before it was
// archived, its record is back, and a second restore is refused.
func TestRestoreBringsArchivedRunBack(t *testing.T) {
	dir := t.TempDir()
	answers, record := archiveTrainingRunWithRecord(t, dir)
	api := newTestAPI(t, withState(t), withArchive(t, dir), withRestorer(t))

	rec := api.do(t, post("/api/_events/flow/abc-123/restore", ""))
	wantStatus(t, rec, http.StatusCreated)
	evs, err := api.store.Range(context.Background(), store.Context{Type: "flow", ID: "abc-123"}, store.RangeQuery{})
	if err != nil {
		t.Fatal(err)
	}
	want := restoreAnswer{Type: "flow", ID: "abc-123", EventCount: len(evs), LastEventID: evs[len(evs)-1].ID.String()}
	if diff := cmp.Diff(want, decode[restoreAnswer](t, rec)); diff != "" {
		t.Errorf("restore answer (-want +got):\n%s", diff)
	}
	for _, q := range archiveQueries {
		rec := api.do(t, get(q))
		wantStatus(t, rec, http.StatusOK)
		if diff := cmp.Diff(answers[q], rec.Body.String()); diff != "" {
			t.Errorf("%s after restore (-before archiving +restored):\n%s", q, diff)
		}
	}
	runs, ok := api.store.(store.RunStore)
	if !ok {
		t.Fatalf("%T keeps no run records", api.store)
	}
	got, err := runs.RunMeta(context.Background(), record.FlowName, record.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(record, got); diff != "" {
		t.Errorf("restored record (-archived +restored):\n%s", diff)
	}

	rec = api.do(t, post("/api/_events/flow/abc-123/restore", ""))
	wantStatus(t, rec, http.StatusConflict)
	if code := decode[errorBody](t, rec).Error.Code; code != nqd.CodeConflict {
		t.Errorf("second restore: code %q, want %q", code, nqd.CodeConflict)
	}
	after, err := api.store.Range(context.Background(), store.Context{Type: "flow", ID: "abc-123"}, store.RangeQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(evs, after); diff != "" {
		t.Errorf("a refused restore changed the stream (-before +after):\n%s", diff)
	}
}

// TestRestoreErrors covers what cannot be restored: a context never
// archived, a corrupt archive, and a server without an archive.
func TestRestoreErrors(t *testing.T) {
	dir := t.TempDir()
	archiveTrainingRun(t, dir)
	api := newTestAPI(t, withArchive(t, dir), withRestorer(t))
	rec := api.do(t, post("/api/_events/flow/never-archived/restore", ""))
	wantStatus(t, rec, http.StatusNotFound)

	path := filepath.Join(dir, "flow", "abc-123.ndjson.gz")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0x01
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	rec = api.do(t, post("/api/_events/flow/abc-123/restore", ""))
	wantStatus(t, rec, http.StatusBadGateway)
	if code := decode[errorBody](t, rec).Error.Code; code != nqd.CodeArchiveCorrupt {
		t.Errorf("corrupt archive: code %q, want %q", code, nqd.CodeArchiveCorrupt)
	}
	if info, err := api.store.Info(context.Background(), store.Context{Type: "flow", ID: "abc-123"}); err != nil || info.Length != 0 {
		t.Errorf("a corrupt archive wrote %+v, %v", info, err)
	}

	bare := newTestAPI(t, withRestorer(t))
	wantStatus(t, bare.do(t, post("/api/_events/flow/abc-123/restore", "")), http.StatusNotFound)
}
