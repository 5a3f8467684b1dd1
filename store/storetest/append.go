package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

func testAppendOrderAndIDs(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-1"}
	var appended []event.Event
	appended = append(appended, mustAppend(t, s, c, evs(c, "step.started", 0, 1))...)
	appended = append(appended, mustAppend(t, s, c, evs(c, "step.completed", 1, 5))...)
	appended = append(appended, mustAppend(t, s, c, evs(c, "log", 6, 3))...)

	for i, e := range appended {
		if e.ID.IsZero() {
			t.Fatalf("event %d has a zero id", i)
		}
		if i > 0 && appended[i-1].ID.Compare(e.ID) >= 0 {
			t.Errorf("ids not strictly increasing: %v then %v", appended[i-1].ID, e.ID)
		}
	}
	diffEvents(t, "Range after appends", appended, mustRange(t, s, c, store.RangeQuery{}))
}

func testTimeFromID(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-ts"}
	before := time.Now()
	got := mustAppend(t, s, c, evs(c, "step.started", 0, 3))
	after := time.Now()
	for _, e := range got {
		ts := e.Time()
		if ts.Before(before.Add(-clockSlack)) || ts.After(after.Add(clockSlack)) {
			t.Errorf("event %v at %v, want within %v of [%v, %v]", e.ID, ts, clockSlack, before, after)
		}
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var wire struct {
			ID string `json:"id"`
			TS string `json:"ts"`
		}
		if err := json.Unmarshal(b, &wire); err != nil {
			t.Fatal(err)
		}
		if want := e.ID.Time().Format(event.TimeFormat); wire.TS != want || wire.ID != e.ID.String() {
			t.Errorf("wire id/ts = %q/%q, want %q/%q", wire.ID, wire.TS, e.ID.String(), want)
		}
	}
}

func testRoundTrip(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-rt"}
	in := []event.Event{
		{
			Kind: "step.failed", Subject: c.ID, RunID: "run-rt", FlowName: "billing", Step: "charge",
			Attempt: 2, Trigger: "trg-1", CorrelationID: "corr-9",
			Data: json.RawMessage(`{"error":"card declined","willRetry":true,"nested":{"a":[1,2,{"b":null}]},"s":"ü\"x"}`),
			Meta: json.RawMessage(`{"attempt":2,"jobId":"job-7","backoff":{"ms":1500}}`),
		},
		{Kind: "log", Subject: c.ID, Data: json.RawMessage(`"just a string"`)},
		{Kind: "emit", Subject: c.ID},
	}
	got := mustAppend(t, s, c, in)
	want := make([]event.Event, len(in))
	for i := range in {
		want[i] = in[i]
		want[i].ID = got[i].ID
	}
	diffEvents(t, "Append result", want, got)
	diffEvents(t, "Range", want, mustRange(t, s, c, store.RangeQuery{}))

	sub := mustSubscribe(t, s, c, 0)
	live := mustAppend(t, s, c, in[:1])
	want0 := in[0]
	want0.ID = live[0].ID
	diffEvents(t, "live event", []event.Event{want0}, receive(t, sub, 1))
}

func testBatchAllOrNothing(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-batch"}
	mustAppend(t, s, c, evs(c, "step.started", 0, 2))
	before := mustInfo(t, s, c)

	for name, bad := range map[string]event.Event{
		"bad kind":   {Kind: "Not A Kind", Subject: c.ID},
		"empty kind": {Subject: c.ID},
		"colon kind": {Kind: "step:done", Subject: c.ID},
	} {
		batch := []event.Event{ev(c, "step.completed", 10), bad, ev(c, "step.completed", 11)}
		_, err := s.Append(t.Context(), c, batch, store.AppendOptions{})
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: Append = %v, want ErrInvalid", name, err)
		}
	}
	if got := mustInfo(t, s, c); got != before {
		t.Errorf("Info after rejected batches = %+v, want %+v", got, before)
	}

	fresh := store.Context{Type: "flow", ID: "run-batch-fresh"}
	_, err := s.Append(t.Context(), fresh, []event.Event{ev(fresh, "ok", 0), {Kind: "BAD"}}, store.AppendOptions{})
	if !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Append to fresh context = %v, want ErrInvalid", err)
	}
	if got := mustInfo(t, s, fresh); got != (store.StreamInfo{}) {
		t.Errorf("fresh context after rejected batch: Info = %+v, want empty", got)
	}
	if page := mustIndexList(t, s, store.Index{Type: "flow"}, 0, 10); hasMember(page, fresh.ID) {
		t.Errorf("rejected batch indexed its context: %+v", page)
	}
}

func testEmptyBatch(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-empty"}
	for _, batch := range [][]event.Event{nil, {}} {
		if _, err := s.Append(t.Context(), c, batch, store.AppendOptions{}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Append(%#v) = %v, want ErrInvalid", batch, err)
		}
	}
}

func testIdempotency(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-idem"}
	opts := store.AppendOptions{IdempotencyKey: "req-1"}
	first, err := s.Append(t.Context(), c, evs(c, "step.started", 0, 3), opts)
	if err != nil {
		t.Fatal(err)
	}
	if first.Replayed {
		t.Fatal("first append with a key: Replayed = true")
	}
	info := mustInfo(t, s, c)

	sub := mustSubscribe(t, s, c, 0)
	again, err := s.Append(t.Context(), c, evs(c, "step.started", 0, 3), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed {
		t.Error("repeat with the same key: Replayed = false")
	}
	diffEvents(t, "replayed events", first.Events, again.Events)
	if got := mustInfo(t, s, c); got != info {
		t.Errorf("Info after replay = %+v, want %+v", got, info)
	}

	// A replay publishes nothing: the next live event is the marker.
	marker := mustAppend(t, s, c, evs(c, "log", 99, 1))
	diffEvents(t, "first live event after replay", marker, receive(t, sub, 1))

	other, err := s.Append(t.Context(), c, evs(c, "step.started", 0, 1), store.AppendOptions{IdempotencyKey: "req-2"})
	if err != nil {
		t.Fatal(err)
	}
	if other.Replayed {
		t.Error("a different key: Replayed = true")
	}
	if got := mustInfo(t, s, c).Length; got != info.Length+2 {
		t.Errorf("length = %d, want %d", got, info.Length+2)
	}
}

// testIdempotencyKeyReused: a client's key reused for other events is
// refused and stores nothing; the same events still replay, and nqd's own
// keys (without SameRequest) replay whatever the repeat carries.
func testIdempotencyKeyReused(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-reused"}
	opts := store.AppendOptions{IdempotencyKey: "req-1", SameRequest: true}
	first, err := s.Append(t.Context(), c, evs(c, "step.started", 0, 2), opts)
	if err != nil {
		t.Fatal(err)
	}
	info := mustInfo(t, s, c)
	for name, other := range map[string][]event.Event{
		"other data": evs(c, "step.started", 5, 2),
		"fewer":      evs(c, "step.started", 0, 1),
		"other kind": evs(c, "step.completed", 0, 2),
	} {
		if res, err := s.Append(t.Context(), c, other, opts); !errors.Is(err, store.ErrKeyReused) {
			t.Errorf("%s with the same key: %+v, %v; want ErrKeyReused", name, res, err)
		}
	}
	if got := mustInfo(t, s, c); got != info {
		t.Errorf("Info after refused reuses = %+v, want %+v", got, info)
	}
	again, err := s.Append(t.Context(), c, evs(c, "step.started", 0, 2), opts)
	if err != nil || !again.Replayed {
		t.Fatalf("the same events again: %+v, %v; want a replay", again, err)
	}
	diffEvents(t, "replayed events", first.Events, again.Events)

	loose := store.AppendOptions{IdempotencyKey: "req-1"}
	if res, err := s.Append(t.Context(), c, evs(c, "step.started", 5, 2), loose); err != nil || !res.Replayed {
		t.Errorf("other events without SameRequest: %+v, %v; want a replay", res, err)
	}
	if got := mustInfo(t, s, c); got != info {
		t.Errorf("Info after replays = %+v, want %+v", got, info)
	}
}

func testIdempotencyScoped(t *testing.T, s store.Store) {
	a := store.Context{Type: "flow", ID: "run-a"}
	b := store.Context{Type: "flow", ID: "run-b"}
	bt := store.Context{Type: "trigger", ID: "run-a"}
	opts := store.AppendOptions{IdempotencyKey: "shared"}
	for _, c := range []store.Context{a, b, bt} {
		res, err := s.Append(t.Context(), c, evs(c, "step.started", 0, 2), opts)
		if err != nil {
			t.Fatalf("Append(%v): %v", c, err)
		}
		if res.Replayed {
			t.Errorf("Append(%v) with a key used only on other contexts: Replayed = true", c)
		}
		if got := mustInfo(t, s, c).Length; got != 2 {
			t.Errorf("Info(%v).Length = %d, want 2", c, got)
		}
	}
}

func testConcurrentWriters(t *testing.T, s store.Store) {
	const writers, perWriter = 50, 20
	c := store.Context{Type: "flow", ID: "run-busy"}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for n := range perWriter {
				e := event.Event{Kind: "log", Subject: c.ID, Data: json.RawMessage(fmt.Sprintf(`{"w":%d,"n":%d}`, w, n))}
				if _, err := s.Append(t.Context(), c, []event.Event{e}, store.AppendOptions{}); err != nil {
					errs <- fmt.Errorf("writer %d event %d: %w", w, n, err)
					return
				}
			}
		})
	}
	waitGroup(t, &wg)
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	got := mustRange(t, s, c, store.RangeQuery{})
	if len(got) != writers*perWriter {
		t.Fatalf("stream holds %d events, want %d", len(got), writers*perWriter)
	}
	next := make(map[int]int)
	for i, e := range got {
		if i > 0 && got[i-1].ID.Compare(e.ID) >= 0 {
			t.Fatalf("ids not strictly increasing at %d: %v then %v", i, got[i-1].ID, e.ID)
		}
		var d struct{ W, N int }
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatalf("event %v: %v", e.ID, err)
		}
		if d.N != next[d.W] {
			t.Fatalf("writer %d: got event %d, want %d (order lost)", d.W, d.N, next[d.W])
		}
		next[d.W]++
	}
	if info := mustInfo(t, s, c); info.Length != int64(writers*perWriter) {
		t.Errorf("Info.Length = %d, want %d", info.Length, writers*perWriter)
	}
}
