// Package storetest is the conformance suite every nqd backend must pass. A
// backend's test calls RunAll once with a constructor that gives each
// scenario a fresh, isolated store, and RunBenchmarks to measure the same
// operations.
//
// The suite assumes the store's clock is the wall clock of the test machine
// (within a few seconds), since event times come from the store.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// waitTimeout bounds every wait on a channel or a goroutine, so a broken
// backend fails the scenario instead of hanging the test binary.
const waitTimeout = 10 * time.Second

// clockSlack is how far a store's clock may drift from the test's clock.
const clockSlack = 5 * time.Second

// scenario is one named conformance check.
type scenario struct {
	name string
	run  func(t *testing.T, s store.Store)
}

var scenarios = []scenario{
	{"AppendOrderAndIDs", testAppendOrderAndIDs},
	{"TimeFromID", testTimeFromID},
	{"RoundTripAllFields", testRoundTrip},
	{"BatchAllOrNothing", testBatchAllOrNothing},
	{"EmptyBatchInvalid", testEmptyBatch},
	{"Idempotency", testIdempotency},
	{"IdempotencyScopedToContext", testIdempotencyScoped},
	{"IdempotencyKeyReused", testIdempotencyKeyReused},
	{"ConcurrentWriters", testConcurrentWriters},
	{"SubscribeSeesLaterAppends", testSubscribeSeesAppends},
	{"TwoSubscribers", testTwoSubscribers},
	{"SubscriptionsAreScopedToContext", testSubscriptionScoped},
	{"SubscriptionClose", testSubscriptionClose},
	{"SubscriptionContextCancel", testSubscriptionContextCancel},
	{"StoreCloseEndsSubscriptions", testStoreCloseEndsSubscriptions},
	{"OverflowDropsOnlySlowSubscriber", testOverflow},
	{"IndexOnFirstEvent", testIndexFirstEvent},
	{"IndexFlowStarted", testIndexFlowStarted},
	{"IndexTriggerRegistered", testIndexTriggerRegistered},
	{"IndexAddKeepsFirstScore", testIndexAddKeepsFirstScore},
	{"IndexListPaging", testIndexListPaging},
	{"IndexListEmpty", testIndexListEmpty},
	{"RangeBounds", testRangeBounds},
	{"RangeThroughTime", testRangeThroughTime},
	{"RangeReverseLimit", testRangeReverseLimit},
	{"RangeKinds", testRangeKinds},
	{"RangeEmptyContext", testRangeEmpty},
	{"Info", testInfo},
	{"InvalidContext", testInvalidContext},
	{"InvalidIndex", testInvalidIndex},
	{"Ping", testPing},
	{"Checkpoints", testCheckpoints},
}

// runStore runs every store.Store scenario as a parallel subtest, each on a
// store of its own from newStore.
func runStore(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.run(t, newStore(t))
		})
	}
}

// eventCmp compares events, treating JSON payloads as equal when they hold the
// same value: a backend may compact or re-encode Data and Meta.
var eventCmp = cmp.Options{
	cmp.Comparer(jsonEqual),
	cmp.Comparer(func(a, b event.ID) bool { return a == b }),
}

func jsonEqual(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return string(a) == string(b)
	}
	return cmp.Equal(va, vb)
}

// ev builds an event of kind for context c with a small payload that tells
// events apart.
func ev(c store.Context, kind string, n int) event.Event {
	return event.Event{Kind: kind, Subject: c.ID, Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
}

func evs(c store.Context, kind string, from, count int) []event.Event {
	out := make([]event.Event, count)
	for i := range out {
		out[i] = ev(c, kind, from+i)
	}
	return out
}

func mustAppend(t *testing.T, s store.Store, c store.Context, batch []event.Event) []event.Event {
	t.Helper()
	res, err := s.Append(t.Context(), c, batch, store.AppendOptions{})
	if err != nil {
		t.Fatalf("Append(%v, %d events): %v", c, len(batch), err)
	}
	if res.Replayed {
		t.Fatalf("Append(%v) without a key: Replayed = true", c)
	}
	if len(res.Events) != len(batch) {
		t.Fatalf("Append(%v): got %d events back, want %d", c, len(res.Events), len(batch))
	}
	return res.Events
}

func mustRange(t *testing.T, s store.Store, c store.Context, q store.RangeQuery) []event.Event {
	t.Helper()
	got, err := s.Range(t.Context(), c, q)
	if err != nil {
		t.Fatalf("Range(%v, %+v): %v", c, q, err)
	}
	return got
}

func mustInfo(t *testing.T, s store.Store, c store.Context) store.StreamInfo {
	t.Helper()
	info, err := s.Info(t.Context(), c)
	if err != nil {
		t.Fatalf("Info(%v): %v", c, err)
	}
	return info
}

func mustSubscribe(t *testing.T, s store.Store, c store.Context, buffer int) store.Subscription {
	t.Helper()
	sub, err := s.Subscribe(t.Context(), c, buffer)
	if err != nil {
		t.Fatalf("Subscribe(%v): %v", c, err)
	}
	t.Cleanup(sub.Close)
	return sub
}

func mustIndexList(t *testing.T, s store.Store, ix store.Index, offset, limit int) store.IndexPage {
	t.Helper()
	page, err := s.IndexList(t.Context(), ix, offset, limit)
	if err != nil {
		t.Fatalf("IndexList(%+v, %d, %d): %v", ix, offset, limit, err)
	}
	return page
}

// receive reads n events from sub, failing if they do not arrive in time or
// the subscription ends first.
func receive(t *testing.T, sub store.Subscription, n int) []event.Event {
	t.Helper()
	var got []event.Event
	deadline := time.After(waitTimeout)
	for len(got) < n {
		select {
		case e, ok := <-sub.C():
			if !ok {
				t.Fatalf("subscription ended after %d of %d events: %v", len(got), n, sub.Err())
			}
			got = append(got, e)
		case <-deadline:
			t.Fatalf("received %d of %d events before the deadline", len(got), n)
		}
	}
	return got
}

// drainUntilEnd reads sub until its channel closes and returns what it read.
func drainUntilEnd(t *testing.T, sub store.Subscription) []event.Event {
	t.Helper()
	var got []event.Event
	deadline := time.After(waitTimeout)
	for {
		select {
		case e, ok := <-sub.C():
			if !ok {
				return got
			}
			got = append(got, e)
		case <-deadline:
			t.Fatalf("subscription did not end before the deadline (read %d events)", len(got))
		}
	}
}

func ids(es []event.Event) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID.String()
	}
	return out
}

func diffEvents(t *testing.T, what string, want, got []event.Event) {
	t.Helper()
	if len(want) == 0 && len(got) == 0 {
		return // nil and empty are the same answer
	}
	if d := cmp.Diff(want, got, eventCmp); d != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", what, d)
	}
}

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
			Kind: "step.failed", Subject: c.ID, Flow: "run-rt", FlowName: "billing", Step: "charge",
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

func waitGroup(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatal("goroutines did not finish before the deadline")
	}
}

func testSubscribeSeesAppends(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-live"}
	mustAppend(t, s, c, evs(c, "step.started", 0, 2))
	sub := mustSubscribe(t, s, c, 100)
	var want []event.Event
	for i := range 5 {
		want = append(want, mustAppend(t, s, c, evs(c, "step.completed", 10*i, 3))...)
	}
	diffEvents(t, "live events", want, receive(t, sub, len(want)))
	if err := sub.Err(); err != nil {
		t.Errorf("Err of a live subscription = %v, want nil", err)
	}
}

func testTwoSubscribers(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-two"}
	a := mustSubscribe(t, s, c, 100)
	b := mustSubscribe(t, s, c, 100)
	var want []event.Event
	for i := range 4 {
		want = append(want, mustAppend(t, s, c, evs(c, "log", 2*i, 2))...)
	}
	diffEvents(t, "subscriber a", want, receive(t, a, len(want)))
	diffEvents(t, "subscriber b", want, receive(t, b, len(want)))
}

func testSubscriptionScoped(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-mine"}
	other := store.Context{Type: "flow", ID: "run-other"}
	sameID := store.Context{Type: "trigger", ID: "run-mine"}
	sub := mustSubscribe(t, s, c, 100)
	mustAppend(t, s, other, evs(other, "log", 0, 2))
	mustAppend(t, s, sameID, evs(sameID, "log", 0, 2))
	// Delivery is in order, so once c's own event arrives anything misrouted
	// would have arrived before it.
	want := mustAppend(t, s, c, evs(c, "log", 5, 1))
	diffEvents(t, "events of the subscribed context", want, receive(t, sub, 1))
}

func testSubscriptionClose(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-unsub"}
	sub := mustSubscribe(t, s, c, 10)
	stay := mustSubscribe(t, s, c, 10)
	sub.Close()
	drainUntilEnd(t, sub)
	if err := sub.Err(); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Err after Close = %v, want ErrClosed", err)
	}
	sub.Close() // a second Close is harmless

	want := mustAppend(t, s, c, evs(c, "log", 0, 2))
	diffEvents(t, "remaining subscriber", want, receive(t, stay, 2))
}

func testSubscriptionContextCancel(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-cancel"}
	ctx, cancel := context.WithCancel(t.Context())
	sub, err := s.Subscribe(ctx, c, 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	cancel()
	drainUntilEnd(t, sub)
	if err := sub.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("Err after the context was cancelled = %v, want context.Canceled", err)
	}
}

func testStoreCloseEndsSubscriptions(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-close"}
	subs := []store.Subscription{mustSubscribe(t, s, c, 10), mustSubscribe(t, s, c, 10)}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, sub := range subs {
		drainUntilEnd(t, sub)
		if err := sub.Err(); !errors.Is(err, store.ErrClosed) {
			t.Errorf("subscription %d: Err after store Close = %v, want ErrClosed", i, err)
		}
	}
	if _, err := s.Subscribe(t.Context(), c, 10); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Subscribe after Close = %v, want ErrClosed", err)
	}
}

func testOverflow(t *testing.T, s store.Store) {
	const slowBuffer, total = 4, 40
	c := store.Context{Type: "flow", ID: "run-slow"}
	slow := mustSubscribe(t, s, c, slowBuffer)
	fast := mustSubscribe(t, s, c, total)

	// The writer must never wait for the slow subscriber, so all appends
	// finish while nobody reads.
	appended := make(chan []event.Event, 1)
	go func() {
		var all []event.Event
		for i := range total {
			res, err := s.Append(context.Background(), c, []event.Event{ev(c, "log", i)}, store.AppendOptions{})
			if err != nil {
				t.Errorf("append %d: %v", i, err)
				break
			}
			all = append(all, res.Events...)
		}
		appended <- all
	}()
	var want []event.Event
	select {
	case want = <-appended:
	case <-time.After(waitTimeout):
		t.Fatal("appends blocked behind a subscriber that does not read")
	}
	if len(want) != total {
		t.FailNow()
	}

	diffEvents(t, "fast subscriber", want, receive(t, fast, total))

	got := drainUntilEnd(t, slow)
	if err := slow.Err(); !errors.Is(err, store.ErrOverflow) {
		t.Errorf("slow subscriber: Err = %v, want ErrOverflow", err)
	}
	if len(got) > slowBuffer {
		t.Errorf("slow subscriber received %d events, more than its buffer of %d", len(got), slowBuffer)
	}
	// What it did receive is the head of the stream, in order: it resumes
	// with Range after its last id.
	diffEvents(t, "slow subscriber's events", want[:len(got)], got)
}

func hasMember(p store.IndexPage, id string) bool {
	for _, e := range p.Entries {
		if e.ID == id {
			return true
		}
	}
	return false
}

func memberScore(t *testing.T, s store.Store, ix store.Index, id string) (int64, bool) {
	t.Helper()
	page := mustIndexList(t, s, ix, 0, 1000)
	for _, e := range page.Entries {
		if e.ID == id {
			return e.Score, true
		}
	}
	return 0, false
}

func testIndexFirstEvent(t *testing.T, s store.Store) {
	c := store.Context{Type: "job", ID: "job-1"}
	first := mustAppend(t, s, c, evs(c, "job.created", 0, 1))
	mustAppend(t, s, c, evs(c, "job.updated", 1, 2))

	ix := store.Index{Type: "job"}
	want := store.IndexPage{Entries: []store.IndexEntry{{ID: c.ID, Score: int64(first[0].ID.MS)}}, Total: 1}
	if d := cmp.Diff(want, mustIndexList(t, s, ix, 0, 10)); d != "" {
		t.Errorf("index after appends (-want +got):\n%s", d)
	}
	// Other types' indexes are untouched.
	if p := mustIndexList(t, s, store.Index{Type: "flow"}, 0, 10); p.Total != 0 || len(p.Entries) != 0 {
		t.Errorf("flow index = %+v, want empty", p)
	}
}

func testIndexFlowStarted(t *testing.T, s store.Store) {
	run1 := store.Context{Type: "flow", ID: "run-1"}
	run2 := store.Context{Type: "flow", ID: "run-2"}
	other := store.Context{Type: "flow", ID: "run-3"}

	// run-1 has an event before its start, so its named-index score is the
	// start's time while the type index keeps the first event's.
	pre := mustAppend(t, s, run1, evs(run1, "log", 0, 1))
	start1 := mustAppend(t, s, run1, []event.Event{{Kind: "flow.started", Subject: run1.ID, Flow: run1.ID, FlowName: "billing"}})
	start2 := mustAppend(t, s, run2, []event.Event{{Kind: "flow.start", Subject: run2.ID, Flow: run2.ID, FlowName: "billing"}})
	mustAppend(t, s, other, []event.Event{{Kind: "flow.started", Subject: other.ID, Flow: other.ID, FlowName: "shipping"}})
	// A repeated start keeps the first score.
	mustAppend(t, s, run1, []event.Event{{Kind: "flow.started", Subject: run1.ID, Flow: run1.ID, FlowName: "billing"}})

	page := mustIndexList(t, s, store.Index{Type: "flow", Name: "billing"}, 0, 10)
	want := []store.IndexEntry{{ID: run1.ID, Score: int64(start1[0].ID.MS)}, {ID: run2.ID, Score: int64(start2[0].ID.MS)}}
	if d := cmp.Diff(want, page.Entries, cmpopts.SortSlices(func(a, b store.IndexEntry) bool { return a.ID < b.ID })); d != "" {
		t.Errorf("flows:billing (-want +got):\n%s", d)
	}
	if page.Total != 2 {
		t.Errorf("flows:billing Total = %d, want 2", page.Total)
	}
	if got, ok := memberScore(t, s, store.Index{Type: "flow"}, run1.ID); !ok || got != int64(pre[0].ID.MS) {
		t.Errorf("type index score of %s = %d, %v; want %d (its first event)", run1.ID, got, ok, pre[0].ID.MS)
	}
	if p := mustIndexList(t, s, store.Index{Type: "flow", Name: "shipping"}, 0, 10); p.Total != 1 || !hasMember(p, other.ID) {
		t.Errorf("flows:shipping = %+v, want only %s", p, other.ID)
	}
}

func testIndexTriggerRegistered(t *testing.T, s store.Store) {
	// A webhook context registers a trigger: the trigger index gains it even
	// though the context's type is not trigger.
	c := store.Context{Type: "webhook", ID: "hook-1"}
	mustAppend(t, s, c, evs(c, "webhook.created", 0, 1))
	reg := mustAppend(t, s, c, []event.Event{{Kind: "trigger.registered", Subject: c.ID, Data: json.RawMessage(`{"type":"webhook"}`)}})

	want := store.IndexPage{Entries: []store.IndexEntry{{ID: c.ID, Score: int64(reg[0].ID.MS)}}, Total: 1}
	if d := cmp.Diff(want, mustIndexList(t, s, store.Index{Type: "trigger"}, 0, 10)); d != "" {
		t.Errorf("trigger index (-want +got):\n%s", d)
	}
	if p := mustIndexList(t, s, store.Index{Type: "webhook"}, 0, 10); !hasMember(p, c.ID) {
		t.Errorf("webhook index = %+v, want %s", p, c.ID)
	}
}

func testIndexAddKeepsFirstScore(t *testing.T, s store.Store) {
	ix := store.Index{Type: "report", Name: "daily"}
	ctx := t.Context()
	for _, add := range []store.IndexEntry{{ID: "a", Score: 100}, {ID: "a", Score: 500}, {ID: "b", Score: 50}, {ID: "a", Score: 1}} {
		if err := s.IndexAdd(ctx, ix, add.ID, add.Score); err != nil {
			t.Fatalf("IndexAdd(%+v): %v", add, err)
		}
	}
	want := store.IndexPage{Entries: []store.IndexEntry{{ID: "a", Score: 100}, {ID: "b", Score: 50}}, Total: 2}
	if d := cmp.Diff(want, mustIndexList(t, s, ix, 0, 10)); d != "" {
		t.Errorf("index (-want +got):\n%s", d)
	}
}

func testIndexListPaging(t *testing.T, s store.Store) {
	ix := store.Index{Type: "flow", Name: "paging"}
	members := []store.IndexEntry{
		{ID: "e", Score: 50}, {ID: "c", Score: 300}, {ID: "b", Score: 100},
		{ID: "a", Score: 300}, {ID: "d", Score: 200}, {ID: "f", Score: 1_700_000_000_000},
	}
	for _, m := range members {
		if err := s.IndexAdd(t.Context(), ix, m.ID, m.Score); err != nil {
			t.Fatalf("IndexAdd(%+v): %v", m, err)
		}
	}
	// Newest first; equal scores by id ascending.
	order := []store.IndexEntry{
		{ID: "f", Score: 1_700_000_000_000}, {ID: "a", Score: 300}, {ID: "c", Score: 300},
		{ID: "d", Score: 200}, {ID: "b", Score: 100}, {ID: "e", Score: 50},
	}
	for _, tc := range []struct{ offset, limit, from, to int }{
		{0, 10, 0, 6},
		{0, 2, 0, 2},
		{2, 2, 2, 4},
		{4, 2, 4, 6},
		{5, 10, 5, 6},
		{6, 2, 6, 6},
		{100, 5, 6, 6},
		{1, 3, 1, 4},
	} {
		page := mustIndexList(t, s, ix, tc.offset, tc.limit)
		want := store.IndexPage{Entries: order[tc.from:tc.to], Total: int64(len(order))}
		if d := cmp.Diff(want, page, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("IndexList(offset %d, limit %d) (-want +got):\n%s", tc.offset, tc.limit, d)
		}
	}
}

func testIndexListEmpty(t *testing.T, s store.Store) {
	page := mustIndexList(t, s, store.Index{Type: "flow", Name: "nothing"}, 0, 10)
	if page.Total != 0 || len(page.Entries) != 0 {
		t.Errorf("empty index = %+v, want no entries and Total 0", page)
	}
}

// kindsStream appends ten events alternating two kinds in three batches.
func kindsStream(t *testing.T, s store.Store, c store.Context) []event.Event {
	t.Helper()
	batch := make([]event.Event, 10)
	for i := range batch {
		kind := "step.started"
		if i%2 == 1 {
			kind = "step.completed"
		}
		batch[i] = ev(c, kind, i)
	}
	var all []event.Event
	all = append(all, mustAppend(t, s, c, batch[:3])...)
	all = append(all, mustAppend(t, s, c, batch[3:4])...)
	all = append(all, mustAppend(t, s, c, batch[4:])...)
	return all
}

func reversed(es []event.Event) []event.Event {
	out := make([]event.Event, len(es))
	for i, e := range es {
		out[len(es)-1-i] = e
	}
	return out
}

func testRangeBounds(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-range"}
	all := kindsStream(t, s, c)
	for _, tc := range []struct {
		name string
		q    store.RangeQuery
		want []event.Event
	}{
		{"all", store.RangeQuery{}, all},
		{"after", store.RangeQuery{After: all[2].ID}, all[3:]},
		{"after last", store.RangeQuery{After: all[9].ID}, nil},
		{"before", store.RangeQuery{Before: all[5].ID}, all[:5]},
		{"before first", store.RangeQuery{Before: all[0].ID}, nil},
		{"through", store.RangeQuery{Through: all[5].ID}, all[:6]},
		{"after and before", store.RangeQuery{After: all[1].ID, Before: all[7].ID}, all[2:7]},
		{"after and through", store.RangeQuery{After: all[1].ID, Through: all[7].ID}, all[2:8]},
		{"limit", store.RangeQuery{Limit: 3}, all[:3]},
		{"after with limit", store.RangeQuery{After: all[3].ID, Limit: 2}, all[4:6]},
		{"limit above length", store.RangeQuery{Limit: 100}, all},
		{"reverse", store.RangeQuery{Reverse: true}, reversed(all)},
		{"reverse before", store.RangeQuery{Reverse: true, Before: all[4].ID}, reversed(all[:4])},
		{"reverse through with limit", store.RangeQuery{Reverse: true, Through: all[6].ID, Limit: 2}, reversed(all[5:7])},
		{"reverse after", store.RangeQuery{Reverse: true, After: all[7].ID}, reversed(all[8:])},
	} {
		diffEvents(t, tc.name, tc.want, mustRange(t, s, c, tc.q))
	}
}

func testRangeThroughTime(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-travel"}
	all := kindsStream(t, s, c)
	// Time travel asks "as of this instant": every event in the same
	// millisecond as the pivot is included, nothing later.
	for _, pivot := range []int{0, 4, 9} {
		at := all[pivot].Time()
		var want []event.Event
		for _, e := range all {
			if !e.Time().After(at) {
				want = append(want, e)
			}
		}
		diffEvents(t, fmt.Sprintf("through IDAt(event %d)", pivot), want, mustRange(t, s, c, store.RangeQuery{Through: event.IDAt(at)}))
	}
	if got := mustRange(t, s, c, store.RangeQuery{Through: event.IDAt(all[0].Time().Add(-time.Millisecond))}); len(got) != 0 {
		t.Errorf("through a time before the stream: got %v, want nothing", ids(got))
	}
}

func testRangeReverseLimit(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-newest"}
	all := kindsStream(t, s, c)
	for _, n := range []int{1, 3, 10, 20} {
		want := reversed(all[max(0, len(all)-n):])
		diffEvents(t, fmt.Sprintf("newest %d", n), want, mustRange(t, s, c, store.RangeQuery{Reverse: true, Limit: n}))
	}
}

func filterKind(es []event.Event, kind string) []event.Event {
	var out []event.Event
	for _, e := range es {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func testRangeKinds(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-kinds"}
	all := kindsStream(t, s, c)
	done := filterKind(all, "step.completed")
	for _, tc := range []struct {
		name string
		q    store.RangeQuery
		want []event.Event
	}{
		{"one kind", store.RangeQuery{Kinds: []string{"step.completed"}}, done},
		{"limit after filter", store.RangeQuery{Kinds: []string{"step.completed"}, Limit: 3}, done[:3]},
		{"reverse limit after filter", store.RangeQuery{Kinds: []string{"step.completed"}, Limit: 2, Reverse: true}, reversed(done[len(done)-2:])},
		{"both kinds", store.RangeQuery{Kinds: []string{"step.completed", "step.started"}}, all},
		{"unknown kind", store.RangeQuery{Kinds: []string{"flow.failed"}}, nil},
		{"kind and after", store.RangeQuery{Kinds: []string{"step.started"}, After: all[4].ID}, filterKind(all[5:], "step.started")},
	} {
		diffEvents(t, tc.name, tc.want, mustRange(t, s, c, tc.q))
	}
}

func testRangeEmpty(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "never-written"}
	for _, q := range []store.RangeQuery{{}, {Reverse: true, Limit: 5}, {Kinds: []string{"log"}}} {
		got, err := s.Range(t.Context(), c, q)
		if err != nil {
			t.Errorf("Range(%+v) of an empty context: %v", q, err)
		}
		if len(got) != 0 {
			t.Errorf("Range(%+v) of an empty context = %v, want empty", q, ids(got))
		}
	}
}

func testInfo(t *testing.T, s store.Store) {
	c := store.Context{Type: "flow", ID: "run-info"}
	if got := mustInfo(t, s, c); got != (store.StreamInfo{}) {
		t.Errorf("Info of an empty context = %+v, want zero", got)
	}
	all := kindsStream(t, s, c)
	want := store.StreamInfo{Length: int64(len(all)), FirstID: all[0].ID, LastID: all[len(all)-1].ID}
	if got := mustInfo(t, s, c); got != want {
		t.Errorf("Info = %+v, want %+v", got, want)
	}
}

var invalidContexts = []store.Context{
	{Type: "a:b", ID: "x"},
	{Type: "", ID: "x"},
	{Type: "Flow", ID: "x"},
	{Type: "flow", ID: "*"},
	{Type: "flow", ID: "list"},
	{Type: "flow", ID: ""},
	{Type: "flow", ID: "a:b"},
	{Type: "flow", ID: "a b"},
	{Type: "flow", ID: "{x}"},
	{Type: "flow", ID: strings.Repeat("a", 200)},
	{Type: strings.Repeat("a", 40), ID: "x"},
}

func testInvalidContext(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, c := range invalidContexts {
		if _, err := s.Append(ctx, c, []event.Event{{Kind: "log"}}, store.AppendOptions{}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Append(%q) = %v, want ErrInvalid", c, err)
		}
		if _, err := s.Range(ctx, c, store.RangeQuery{}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Range(%q) = %v, want ErrInvalid", c, err)
		}
		if _, err := s.Info(ctx, c); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Info(%q) = %v, want ErrInvalid", c, err)
		}
		sub, err := s.Subscribe(ctx, c, 1)
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Subscribe(%q) = %v, want ErrInvalid", c, err)
		}
		if sub != nil {
			sub.Close()
		}
	}
}

func testInvalidIndex(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, ix := range []store.Index{
		{Type: "a:b"},
		{Type: ""},
		{Type: "Flow"},
		{Type: "flow", Name: "*"},
		{Type: "flow", Name: "a:b"},
		{Type: "flow", Name: "a b"},
		{Type: "flow", Name: strings.Repeat("n", 200)},
	} {
		if err := s.IndexAdd(ctx, ix, "x", 1); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("IndexAdd(%+v) = %v, want ErrInvalid", ix, err)
		}
		if _, err := s.IndexList(ctx, ix, 0, 10); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("IndexList(%+v) = %v, want ErrInvalid", ix, err)
		}
	}
}

func testPing(t *testing.T, s store.Store) {
	if err := s.Ping(t.Context()); err != nil {
		t.Errorf("Ping = %v, want nil", err)
	}
}
