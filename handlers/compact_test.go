package handlers_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/compact"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/snapshots"
	"github.com/nqd-dev/nqd/store"
)

// withCompaction wires compaction into dir as the server does: the state
// cache and the read routes read through the archive, and the compact route
// is on.
func withCompaction(t testing.TB, dir string) func(*handlers.Deps) {
	return func(d *handlers.Deps) {
		seg, err := archive.NewDir(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		st, ok := d.Store.(compact.Store)
		if !ok {
			t.Fatalf("%T cannot be compacted", d.Store)
		}
		history := compact.NewReader(st, seg)
		states := snapshots.New(history, snapshots.Options{Checkpoints: st, CheckpointEvery: snapshots.DefaultCheckpointEvery, Logger: testkit.Logger(t)})
		t.Cleanup(func() { _ = states.Close() })
		d.State = states
		d.History = history
		d.Compactor = compact.New(st, seg, compact.Options{SegmentEvents: 1000})
	}
}

// compactAnswer is the compact route's answer.
type compactAnswer struct {
	Type       string `json:"type"`
	ID         string `json:"id"`
	Checkpoint string `json:"checkpoint"`
	Archived   int64  `json:"archived"`
	Trimmed    int64  `json:"trimmed"`
	Segments   int    `json:"segments"`
}

// contextAnswer is the part of the context route's answer this test reads.
type contextAnswer struct {
	EventCount  int64         `json:"eventCount"`
	LastEventID string        `json:"lastEventId"`
	Events      []event.Event `json:"events"`
}

// TestCompactKeepsAnswers compacts a 3,000-event run before its 2,500th
// event: the live stream shrinks, and time travel, diffs and early pages
// answer exactly as before, read through to the archive.
func TestCompactKeepsAnswers(t *testing.T) {
	api := newTestAPI(t, withCompaction(t, t.TempDir()))
	c := store.Context{Type: "flow", ID: "long-run"}
	const total = 3000
	for i := 0; i < total; i += 500 {
		batch := make([]event.Event, 500)
		for j := range batch {
			batch[j] = event.Event{Kind: fmt.Sprintf("k%d", (i+j)%7), Subject: c.ID, Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i+j))}
		}
		if _, err := api.store.Append(t.Context(), c, batch, store.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := api.store.Range(t.Context(), c, store.RangeQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != total {
		t.Fatalf("stored %d events, want %d", len(evs), total)
	}
	base := "/api/_events/flow/long-run"
	queries := []string{
		base + "/state?at=" + evs[9].ID.String(),
		base + "/state?at=" + evs[2498].ID.String(),
		base + "/state?at=" + evs[2499].ID.String(),
		base + "/state",
		base + "?at=" + evs[99].ID.String() + "&limit=50",
		base + "/state/diff?from=" + evs[5].ID.String() + "&to=" + evs[2600].ID.String(),
	}
	before := map[string]string{}
	for _, q := range queries {
		rec := api.do(t, get(q))
		wantStatus(t, rec, http.StatusOK)
		before[q] = rec.Body.String()
	}

	rec := api.do(t, post(base+"/compact?before="+url.QueryEscape(evs[2499].ID.String()), ""))
	wantStatus(t, rec, http.StatusOK)
	want := compactAnswer{Type: "flow", ID: "long-run", Checkpoint: evs[2498].ID.String(), Archived: 2499, Trimmed: 2499, Segments: 3}
	if diff := cmp.Diff(want, decode[compactAnswer](t, rec)); diff != "" {
		t.Errorf("compact answer (-want +got):\n%s", diff)
	}
	live, err := api.store.Range(t.Context(), c, store.RangeQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != total-2499 || live[0].ID != evs[2499].ID {
		t.Fatalf("live stream after compaction: %d events from %s, want %d from %s", len(live), live[0].ID, total-2499, evs[2499].ID)
	}

	for _, q := range queries {
		rec := api.do(t, get(q))
		wantStatus(t, rec, http.StatusOK)
		if diff := cmp.Diff(before[q], rec.Body.String()); diff != "" {
			t.Errorf("%s after compaction (-before +after):\n%s", q, diff)
		}
	}

	// Without at, eventCount is the live stream's length while the events
	// still start at the first one ever written.
	got := decode[contextAnswer](t, api.do(t, get(base+"?limit=3")))
	if got.EventCount != int64(total-2499) || got.LastEventID != evs[total-1].ID.String() {
		t.Errorf("context: eventCount %d, lastEventId %s; want %d, %s", got.EventCount, got.LastEventID, total-2499, evs[total-1].ID)
	}
	if len(got.Events) != 3 || got.Events[0].ID != evs[0].ID {
		t.Errorf("context events start at %v, want the archived %s", got.Events, evs[0].ID)
	}
	page := decode[contextAnswer](t, api.do(t, get(base+"?limit=20&fromId="+evs[1000].ID.String())))
	var ids, wantIDs []event.ID
	for _, e := range page.Events {
		ids = append(ids, e.ID)
	}
	for _, e := range evs[1001:1021] {
		wantIDs = append(wantIDs, e.ID)
	}
	if diff := cmp.Diff(wantIDs, ids); diff != "" {
		t.Errorf("archived page (-want +got):\n%s", diff)
	}
	atEnd := decode[contextAnswer](t, api.do(t, get(base+"?limit=1&at="+evs[total-1].ID.String())))
	if atEnd.EventCount != total {
		t.Errorf("context at the newest event: eventCount %d, want every event, %d", atEnd.EventCount, total)
	}

	// Again through the same point: nothing left to move.
	rec = api.do(t, post(base+"/compact?before="+evs[2499].ID.String(), ""))
	wantStatus(t, rec, http.StatusOK)
	if got := decode[compactAnswer](t, rec); got.Archived != 0 || got.Trimmed != 0 || got.Checkpoint != evs[2498].ID.String() {
		t.Errorf("second compaction: %+v, want nothing archived or trimmed", got)
	}
}

// TestCompactErrors covers a bad bound, a bound before every event and a
// server without an archive.
func TestCompactErrors(t *testing.T) {
	api := newTestAPI(t, withCompaction(t, t.TempDir()))
	c := store.Context{Type: "flow", ID: "run-1"}
	res, err := api.store.Append(t.Context(), c, []event.Event{{Kind: "a", Subject: c.ID}, {Kind: "b", Subject: c.ID}}, store.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, before := range []string{"", "yesterday", "0-0", "1-x", "1970-01-01T00:00:00Z"} {
		rec := api.do(t, post("/api/_events/flow/run-1/compact?before="+url.QueryEscape(before), ""))
		wantStatus(t, rec, http.StatusBadRequest)
		if f := decode[errorBody](t, rec).Error.Fields["before"]; f == "" {
			t.Errorf("before=%q: no field error for before", before)
		}
	}
	first := res.Events[0].ID
	rec := api.do(t, post("/api/_events/flow/run-1/compact?before="+first.String(), ""))
	wantStatus(t, rec, http.StatusNotFound)

	plain := newTestAPI(t)
	rec = plain.do(t, post("/api/_events/flow/run-1/compact?before="+first.String(), ""))
	wantStatus(t, rec, http.StatusNotFound)
	if msg := decode[errorBody](t, rec).Error.Message; msg == "" {
		t.Error("no archive: empty message")
	}
}
