package storetest

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/store"
)

// KVHarness is a store.KV under test and the means to move its clock.
type KVHarness struct {
	KV store.KV
	// Advance moves the backend's clock forward by d. It is nil for a backend
	// on the real clock (Redis), where the suite waits for expiry instead.
	Advance func(d time.Duration)
}

var kvScenarios = []struct {
	name string
	run  func(t *testing.T, h KVHarness)
}{
	{"GetPutDelete", testKVGetPutDelete},
	{"InvalidChangesNothing", testKVInvalid},
	{"SetFields", testKVSetFields},
	{"CompareAndSwap", testKVCompareAndSwap},
	{"CompareAndSwapRaceOneWinsPerVersion", testKVCASRace},
	{"CompareAndSwapRaceOnField", testKVCASFieldRace},
	{"TTL", testKVTTL},
	{"ScanMatchesBruteForce", testKVScan},
}

// runKV runs the store.KV conformance scenarios against fresh stores from
// newKV.
func runKV(t *testing.T, newKV func(t *testing.T) KVHarness) {
	for _, sc := range kvScenarios {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, newKV(t)) })
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want %v", what, err, want)
	}
}

func mustGet(t *testing.T, kv store.KV, key string) store.Record {
	t.Helper()
	r, err := kv.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	return r
}

func mustPut(t *testing.T, kv store.KV, key string, fields map[string]string, ttl time.Duration) int64 {
	t.Helper()
	v, err := kv.Put(t.Context(), key, fields, ttl)
	if err != nil {
		t.Fatalf("Put(%s): %v", key, err)
	}
	return v
}

func testKVGetPutDelete(t *testing.T, h KVHarness) {
	kv, ctx := h.KV, t.Context()
	must(t, kv.Ping(ctx))
	_, err := kv.Get(ctx, "tasks.email.job-1")
	wantErr(t, "Get of nothing", err, store.ErrNotFound)

	if v := mustPut(t, kv, "tasks.email.job-1", map[string]string{"state": "pending", "step": "1"}, 0); v != 1 {
		t.Errorf("first Put: version %d, want 1", v)
	}
	got := mustGet(t, kv, "tasks.email.job-1")
	want := store.Record{Fields: map[string]string{"state": "pending", "step": "1"}, Version: 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}

	// Put replaces the whole record.
	if v := mustPut(t, kv, "tasks.email.job-1", map[string]string{"state": "running"}, 0); v != 2 {
		t.Errorf("second Put: version %d, want 2", v)
	}
	got = mustGet(t, kv, "tasks.email.job-1")
	want = store.Record{Fields: map[string]string{"state": "running"}, Version: 2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Get after replacing (-want +got):\n%s", diff)
	}
	v, err := kv.GetField(ctx, "tasks.email.job-1", "state")
	if err != nil || v != "running" {
		t.Errorf("GetField(state) = %q, %v; want running", v, err)
	}
	_, err = kv.GetField(ctx, "tasks.email.job-1", "step")
	wantErr(t, "GetField of a field Put dropped", err, store.ErrNotFound)
	_, err = kv.GetField(ctx, "tasks.email.job-2", "state")
	wantErr(t, "GetField of a missing record", err, store.ErrNotFound)

	// Values are bytes: empty, unicode and JSON survive unchanged.
	odd := map[string]string{"empty": "", "text": "héllo\nwörld", "json": `{"a":[1,2]}`}
	mustPut(t, kv, "odd", odd, 0)
	if got := mustGet(t, kv, "odd").Fields; !maps.Equal(got, odd) {
		t.Errorf("odd values: got %q, want %q", got, odd)
	}

	must(t, kv.Delete(ctx, "tasks.email.job-1"))
	_, err = kv.Get(ctx, "tasks.email.job-1")
	wantErr(t, "Get after Delete", err, store.ErrNotFound)
	wantErr(t, "second Delete", kv.Delete(ctx, "tasks.email.job-1"), store.ErrNotFound)
	// A record created again starts a new life.
	if v := mustPut(t, kv, "tasks.email.job-1", map[string]string{"state": "pending"}, 0); v != 1 {
		t.Errorf("Put after Delete: version %d, want 1", v)
	}
}

func testKVInvalid(t *testing.T, h KVHarness) {
	kv, ctx := h.KV, t.Context()
	ok := map[string]string{"state": "x"}
	badKeys := []string{"", "a:b", "a/b", "a*", "a?", "[a]", "{a}", " a", "a b", "_a", ".a", strings.Repeat("k", 129), "ünï"}
	for _, key := range badKeys {
		_, err := kv.Put(ctx, key, ok, 0)
		wantErr(t, fmt.Sprintf("Put(%q)", key), err, store.ErrInvalid)
		_, err = kv.Get(ctx, key)
		wantErr(t, fmt.Sprintf("Get(%q)", key), err, store.ErrInvalid)
		_, err = kv.SetFields(ctx, key, ok)
		wantErr(t, fmt.Sprintf("SetFields(%q)", key), err, store.ErrInvalid)
		wantErr(t, fmt.Sprintf("Delete(%q)", key), kv.Delete(ctx, key), store.ErrInvalid)
		_, err = kv.CompareAndSwap(ctx, key, store.Condition{Version: 1}, ok)
		wantErr(t, fmt.Sprintf("CompareAndSwap(%q)", key), err, store.ErrInvalid)
	}

	mustPut(t, kv, "k", map[string]string{"state": "pending"}, 0)
	badFields := []map[string]string{
		{"_v": "9"}, {"a:b": "x"}, {"": "x"}, {"a b": "x"},
		{"big": strings.Repeat("x", store.MaxKVValueLen+1)},
		tooManyFields(),
	}
	for _, f := range badFields {
		_, err := kv.Put(ctx, "k", f, 0)
		wantErr(t, fmt.Sprintf("Put with fields %.40v", f), err, store.ErrInvalid)
		_, err = kv.SetFields(ctx, "k", f)
		wantErr(t, fmt.Sprintf("SetFields %.40v", f), err, store.ErrInvalid)
		_, err = kv.CompareAndSwap(ctx, "k", store.Condition{Field: "state", Value: "pending"}, f)
		wantErr(t, fmt.Sprintf("CompareAndSwap setting %.40v", f), err, store.ErrInvalid)
	}
	_, err := kv.SetFields(ctx, "k", nil)
	wantErr(t, "SetFields of nothing", err, store.ErrInvalid)
	_, err = kv.Put(ctx, "k", ok, -time.Second)
	wantErr(t, "Put with a negative TTL", err, store.ErrInvalid)
	for _, c := range []store.Condition{{}, {Field: "_v", Value: "1"}, {Value: "x"}, {Version: -1}} {
		_, err = kv.CompareAndSwap(ctx, "k", c, ok)
		wantErr(t, fmt.Sprintf("CompareAndSwap if %+v", c), err, store.ErrInvalid)
	}
	_, err = kv.GetField(ctx, "k", "_v")
	wantErr(t, "GetField(_v)", err, store.ErrInvalid)
	for _, q := range []store.ScanQuery{
		{Prefix: "a:"}, {Prefix: "a*"}, {Prefix: "_"}, {Max: -1},
		{Filter: &store.Filter{Field: "state", Op: "ne", Value: "x"}},
		{Filter: &store.Filter{Field: "a:b", Op: store.OpEq}},
	} {
		_, err = kv.Scan(ctx, q)
		wantErr(t, fmt.Sprintf("Scan(%+v)", q), err, store.ErrInvalid)
	}

	want := store.Record{Fields: map[string]string{"state": "pending"}, Version: 1}
	if diff := cmp.Diff(want, mustGet(t, kv, "k")); diff != "" {
		t.Errorf("record after rejected writes (-want +got):\n%s", diff)
	}
}

func tooManyFields() map[string]string {
	f := make(map[string]string, store.MaxKVFields+1)
	for i := range store.MaxKVFields + 1 {
		f["f"+strconv.Itoa(i)] = "x"
	}
	return f
}

func testKVSetFields(t *testing.T, h KVHarness) {
	kv, ctx := h.KV, t.Context()
	v, err := kv.SetFields(ctx, "job", map[string]string{"state": "pending"})
	if err != nil || v != 1 {
		t.Fatalf("SetFields creating: %d, %v; want version 1", v, err)
	}
	v, err = kv.SetFields(ctx, "job", map[string]string{"state": "running", "worker": "w1"})
	if err != nil || v != 2 {
		t.Fatalf("SetFields merging: %d, %v; want version 2", v, err)
	}
	v, err = kv.SetFields(ctx, "job", map[string]string{"step": "3"})
	if err != nil || v != 3 {
		t.Fatalf("SetFields one field: %d, %v; want version 3", v, err)
	}
	want := store.Record{Fields: map[string]string{"state": "running", "worker": "w1", "step": "3"}, Version: 3}
	if diff := cmp.Diff(want, mustGet(t, kv, "job")); diff != "" {
		t.Errorf("after SetFields (-want +got):\n%s", diff)
	}

	// SetFields keeps a TTL.
	mustPut(t, kv, "leased", map[string]string{"state": "claimed"}, time.Hour)
	if _, err := kv.SetFields(ctx, "leased", map[string]string{"state": "running"}); err != nil {
		t.Fatal(err)
	}
	if r := mustGet(t, kv, "leased"); r.TTL <= 0 || r.TTL > time.Hour || r.Fields["state"] != "running" {
		t.Errorf("after SetFields on a record with a TTL: %+v, want state running and TTL in (0, 1h]", r)
	}

	// A merge may not grow a record past the field limit.
	big := tooManyFields()
	delete(big, "f0")
	mustPut(t, kv, "full", big, 0)
	_, err = kv.SetFields(ctx, "full", map[string]string{"extra": "x"})
	wantErr(t, "SetFields past the field limit", err, store.ErrInvalid)
	if r := mustGet(t, kv, "full"); len(r.Fields) != store.MaxKVFields || r.Version != 1 {
		t.Errorf("full record after a rejected merge: %d fields, version %d", len(r.Fields), r.Version)
	}
}

func testKVCompareAndSwap(t *testing.T, h KVHarness) {
	kv, ctx := h.KV, t.Context()
	_, err := kv.CompareAndSwap(ctx, "job", store.Condition{Field: "state", Value: "pending"}, map[string]string{"state": "claimed"})
	wantErr(t, "CompareAndSwap on no record", err, store.ErrNotFound)

	mustPut(t, kv, "job", map[string]string{"state": "pending", "step": "1"}, 0)
	claim := map[string]string{"state": "claimed", "worker": "w1"}
	v, err := kv.CompareAndSwap(ctx, "job", store.Condition{Field: "state", Value: "pending"}, claim)
	if err != nil || v != 2 {
		t.Fatalf("claim: %d, %v; want version 2", v, err)
	}
	_, err = kv.CompareAndSwap(ctx, "job", store.Condition{Field: "state", Value: "pending"}, map[string]string{"worker": "w2"})
	wantErr(t, "second claim", err, store.ErrConflict)
	_, err = kv.CompareAndSwap(ctx, "job", store.Condition{Field: "missing", Value: ""}, map[string]string{"worker": "w2"})
	wantErr(t, "condition on a missing field", err, store.ErrConflict)
	_, err = kv.CompareAndSwap(ctx, "job", store.Condition{Version: 1}, map[string]string{"worker": "w2"})
	wantErr(t, "stale version", err, store.ErrConflict)
	_, err = kv.CompareAndSwap(ctx, "job", store.Condition{Field: "state", Value: "claimed", Version: 1}, map[string]string{"worker": "w2"})
	wantErr(t, "right value, stale version", err, store.ErrConflict)
	_, err = kv.CompareAndSwap(ctx, "job", store.Condition{Field: "state", Value: "pending", Version: 2}, map[string]string{"worker": "w2"})
	wantErr(t, "right version, wrong value", err, store.ErrConflict)

	want := store.Record{Fields: map[string]string{"state": "claimed", "worker": "w1", "step": "1"}, Version: 2}
	if diff := cmp.Diff(want, mustGet(t, kv, "job")); diff != "" {
		t.Errorf("after failed swaps (-want +got):\n%s", diff)
	}
	v, err = kv.CompareAndSwap(ctx, "job", store.Condition{Field: "state", Value: "claimed", Version: 2}, map[string]string{"state": "done"})
	if err != nil || v != 3 {
		t.Fatalf("swap on value and version: %d, %v; want version 3", v, err)
	}
	v, err = kv.CompareAndSwap(ctx, "job", store.Condition{Version: 3}, map[string]string{"step": "2"})
	if err != nil || v != 4 {
		t.Fatalf("swap on version: %d, %v; want version 4", v, err)
	}
	want = store.Record{Fields: map[string]string{"state": "done", "worker": "w1", "step": "2"}, Version: 4}
	if diff := cmp.Diff(want, mustGet(t, kv, "job")); diff != "" {
		t.Errorf("after swaps (-want +got):\n%s", diff)
	}
}

// testKVCASRace has 100 writers each read the record and swap on the version
// they read. The record leaves a version only through a swap expecting it,
// so of the writers that read one version exactly one wins, and the final
// version counts the versions read.
func testKVCASRace(t *testing.T, h KVHarness) {
	kv, ctx := h.KV, t.Context()
	const writers = 100
	mustPut(t, kv, "race", map[string]string{"owner": "none"}, 0)
	for round := range 3 {
		start := mustGet(t, kv, "race").Version
		type attempt struct {
			read, got int64
			err       error
		}
		attempts := make([]attempt, writers)
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for i := range writers {
			wg.Go(func() {
				<-gate
				r, err := kv.Get(ctx, "race")
				if err != nil {
					attempts[i].err = err
					return
				}
				attempts[i].read = r.Version
				attempts[i].got, attempts[i].err = kv.CompareAndSwap(ctx, "race", store.Condition{Version: r.Version},
					map[string]string{"owner": strconv.Itoa(i)})
			})
		}
		close(gate)
		waitGroup(t, &wg)

		wins := map[int64][]int{} // version read -> winners
		readers := map[int64]int{}
		var lastWinner int
		var newest int64
		for i, a := range attempts {
			switch {
			case a.err == nil:
				wins[a.read] = append(wins[a.read], i)
				if a.got != a.read+1 {
					t.Errorf("round %d: writer %d swapped version %d into %d", round, i, a.read, a.got)
				}
				if a.got > newest {
					newest, lastWinner = a.got, i
				}
			case !errors.Is(a.err, store.ErrConflict):
				t.Fatalf("round %d: writer %d: %v", round, i, a.err)
			}
			readers[a.read]++
		}
		for v := range readers {
			if len(wins[v]) != 1 {
				t.Errorf("round %d: %d writers read version %d and %d won (%v), want exactly one", round, readers[v], v, len(wins[v]), wins[v])
			}
		}
		end := mustGet(t, kv, "race")
		if end.Version != start+int64(len(readers)) {
			t.Errorf("round %d: version %d after %d versions read from %d", round, end.Version, len(readers), start)
		}
		if end.Fields["owner"] != strconv.Itoa(lastWinner) {
			t.Errorf("round %d: owner %q, want the last winner %d", round, end.Fields["owner"], lastWinner)
		}
	}
}

// testKVCASFieldRace is a worker claim: many workers swap state from pending
// to claimed at once and exactly one does.
func testKVCASFieldRace(t *testing.T, h KVHarness) {
	kv, ctx := h.KV, t.Context()
	const workers = 100
	mustPut(t, kv, "tasks.email.job-7", map[string]string{"state": "pending"}, time.Hour)
	var wg sync.WaitGroup
	errs := make([]error, workers)
	gate := make(chan struct{})
	for i := range workers {
		wg.Go(func() {
			<-gate
			_, errs[i] = kv.CompareAndSwap(ctx, "tasks.email.job-7", store.Condition{Field: "state", Value: "pending"},
				map[string]string{"state": "claimed", "worker": "w" + strconv.Itoa(i)})
		})
	}
	close(gate)
	waitGroup(t, &wg)
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("workers %d and %d both claimed", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, store.ErrConflict):
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no worker claimed the job")
	}
	r := mustGet(t, kv, "tasks.email.job-7")
	if r.Fields["worker"] != "w"+strconv.Itoa(winner) || r.Version != 2 {
		t.Errorf("after the race: %+v, want worker w%d at version 2", r, winner)
	}
}

func testKVTTL(t *testing.T, h KVHarness) {
	kv, ctx := h.KV, t.Context()
	// On the real clock the short TTL is long enough that a loaded machine
	// cannot let it run out before the record is read back.
	ttl := time.Minute
	if h.Advance == nil {
		ttl = 2 * time.Second
	}
	mustPut(t, kv, "short", map[string]string{"state": "claimed"}, ttl)
	if r := mustGet(t, kv, "short"); r.TTL <= 0 || r.TTL > ttl {
		t.Errorf("short TTL %v, want in (0, %v]", r.TTL, ttl)
	}
	mustPut(t, kv, "long", map[string]string{"state": "claimed"}, time.Hour)
	mustPut(t, kv, "forever", map[string]string{"state": "claimed"}, 0)
	// A Put without a TTL lifts an earlier one.
	mustPut(t, kv, "lifted", map[string]string{"state": "claimed"}, time.Hour)
	mustPut(t, kv, "lifted", map[string]string{"state": "done"}, 0)
	if r := mustGet(t, kv, "lifted"); r.TTL != 0 {
		t.Errorf("TTL after a Put without one: %v, want 0", r.TTL)
	}

	if h.Advance != nil {
		h.Advance(ttl + time.Second)
	} else {
		wait.For(t, 10*time.Second, 10*time.Millisecond, "the short record to expire", func() bool {
			_, err := kv.Get(ctx, "short")
			return errors.Is(err, store.ErrNotFound)
		})
	}
	_, err := kv.Get(ctx, "short")
	wantErr(t, "Get after expiry", err, store.ErrNotFound)
	_, err = kv.GetField(ctx, "short", "state")
	wantErr(t, "GetField after expiry", err, store.ErrNotFound)
	_, err = kv.CompareAndSwap(ctx, "short", store.Condition{Field: "state", Value: "claimed"}, map[string]string{"state": "x"})
	wantErr(t, "CompareAndSwap after expiry", err, store.ErrNotFound)
	found, err := kv.Scan(ctx, store.ScanQuery{})
	must(t, err)
	if got, want := entryKeys(found), []string{"forever", "lifted", "long"}; !slices.Equal(got, want) {
		t.Errorf("Scan after expiry: %v, want %v", got, want)
	}
	for _, key := range []string{"long", "forever", "lifted"} {
		mustGet(t, kv, key)
	}
	// An expired record is gone: writing the key starts a new one.
	v, err := kv.SetFields(ctx, "short", map[string]string{"state": "pending"})
	if err != nil || v != 1 {
		t.Errorf("SetFields on an expired key: %d, %v; want version 1", v, err)
	}
	if r := mustGet(t, kv, "short"); r.TTL != 0 || len(r.Fields) != 1 {
		t.Errorf("record written over an expired one: %+v, want one field and no TTL", r)
	}
}

func entryKeys(es []store.KVEntry) []string {
	keys := make([]string, len(es))
	for i, e := range es {
		keys[i] = e.Key
	}
	return keys
}

// testKVScan fills the store with random records, changes some, and checks
// random scans against a brute-force filter over a model of the store.
func testKVScan(t *testing.T, h KVHarness) {
	kv, ctx := h.KV, t.Context()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))

	states := []string{"pending", "claimed", "running", "completed", "failed"}
	prefixes := []string{"tasks.email.", "tasks.sms.", "tasks.emailx.", "runs."}
	model := map[string]map[string]string{}
	for i := range 150 {
		key := prefixes[rng.IntN(len(prefixes))] + "job-" + strconv.Itoa(i)
		f := map[string]string{"state": states[rng.IntN(len(states))]}
		if rng.IntN(5) > 0 {
			// Mixed widths, so that a string order would differ from the
			// numeric one.
			f["updated_at"] = strconv.Itoa(rng.IntN(20000))
		}
		if rng.IntN(3) == 0 {
			f["worker"] = "w" + strconv.Itoa(rng.IntN(9))
		}
		mustPut(t, kv, key, f, 0)
		model[key] = f
	}
	keys := slices.Sorted(maps.Keys(model))
	for _, key := range keys[:20] {
		must(t, kv.Delete(ctx, key))
		delete(model, key)
	}
	for _, key := range keys[20:40] {
		f := map[string]string{"state": "completed", "updated_at": strconv.Itoa(rng.IntN(20000))}
		if _, err := kv.SetFields(ctx, key, f); err != nil {
			t.Fatal(err)
		}
		maps.Copy(model[key], f)
	}

	fields := []string{"state", "updated_at", "worker", "absent"}
	for i := range 60 {
		q := store.ScanQuery{Prefix: []string{"", "tasks.", "tasks.email", "tasks.email.", "runs.", "none."}[rng.IntN(6)]}
		if rng.IntN(5) > 0 {
			f := &store.Filter{Field: fields[rng.IntN(len(fields))], Op: []string{store.OpEq, store.OpLt, store.OpGt}[rng.IntN(3)]}
			switch f.Field {
			case "state":
				f.Value = states[rng.IntN(len(states))]
			case "updated_at":
				f.Value = strconv.Itoa(rng.IntN(21000))
			default:
				f.Value = "w" + strconv.Itoa(rng.IntN(9))
			}
			q.Filter = f
		}
		var want []string
		for _, key := range slices.Sorted(maps.Keys(model)) {
			if strings.HasPrefix(key, q.Prefix) && bruteMatch(q.Filter, model[key]) {
				want = append(want, key)
			}
		}
		if i%3 == 0 && len(want) > 1 {
			q.Max = 1 + rng.IntN(len(want)-1)
		}
		got, err := kv.Scan(ctx, q)
		if err != nil {
			t.Fatalf("Scan(%+v): %v", q, err)
		}
		gotKeys := entryKeys(got)
		if !slices.IsSorted(gotKeys) {
			t.Errorf("Scan(%+v) not in key order: %v", q, gotKeys)
		}
		for _, e := range got {
			if !maps.Equal(e.Record.Fields, model[e.Key]) {
				t.Errorf("Scan(%+v): %s has %v, want %v", q, e.Key, e.Record.Fields, model[e.Key])
			}
		}
		if q.Max == 0 {
			if !slices.Equal(gotKeys, want) {
				t.Errorf("Scan(prefix %q, filter %+v): got %v, want %v", q.Prefix, q.Filter, gotKeys, want)
			}
			continue
		}
		if len(gotKeys) != q.Max {
			t.Errorf("Scan(%+v): %d records, want the cap %d of %d matching", q, len(gotKeys), q.Max, len(want))
		}
		for _, k := range gotKeys {
			if !slices.Contains(want, k) {
				t.Errorf("capped Scan(%+v) returned %s, which does not match", q, k)
			}
		}
	}
}

// bruteMatch is the filter rule, written out independently of
// store.Filter.Match: numbers compare as numbers, anything else as strings.
func bruteMatch(f *store.Filter, fields map[string]string) bool {
	if f == nil {
		return true
	}
	v, ok := fields[f.Field]
	if !ok {
		return false
	}
	var c int
	a, errA := strconv.ParseFloat(v, 64)
	b, errB := strconv.ParseFloat(f.Value, 64)
	if errA == nil && errB == nil {
		c = sign(a - b)
	} else {
		c = strings.Compare(v, f.Value)
	}
	return f.Op == store.OpEq && c == 0 || f.Op == store.OpLt && c < 0 || f.Op == store.OpGt && c > 0
}

func sign(x float64) int {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

// RunKVBenchmarks measures the KV operations a worker pool and a sweeper
// use against fresh stores from newKV.
func RunKVBenchmarks(b *testing.B, newKV func(b *testing.B) store.KV) {
	b.Run("CompareAndSwap", func(b *testing.B) {
		kv := newKV(b)
		v, err := kv.Put(b.Context(), "job", map[string]string{"state": "pending"}, 0)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if v, err = kv.CompareAndSwap(b.Context(), "job", store.Condition{Version: v}, map[string]string{"state": "claimed"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("SetFieldsParallel", func(b *testing.B) {
		kv := newKV(b)
		b.RunParallel(func(pb *testing.PB) {
			key := "job-" + strconv.Itoa(rand.IntN(1<<30))
			for pb.Next() {
				if _, err := kv.SetFields(b.Context(), key, map[string]string{"state": "running", "updated_at": "1764106747116"}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("Scan1000Filtered", func(b *testing.B) {
		kv := newKV(b)
		for i := range 1000 {
			f := map[string]string{"state": "running", "updated_at": strconv.Itoa(i)}
			if _, err := kv.Put(b.Context(), "tasks.email.job-"+strconv.Itoa(i), f, 0); err != nil {
				b.Fatal(err)
			}
		}
		q := store.ScanQuery{Prefix: "tasks.", Filter: &store.Filter{Field: "updated_at", Op: store.OpLt, Value: "100"}}
		for b.Loop() {
			got, err := kv.Scan(b.Context(), q)
			if err != nil || len(got) != 100 {
				b.Fatalf("Scan: %d records, %v; want 100", len(got), err)
			}
		}
	})
}
