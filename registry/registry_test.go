package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/reducers"
	"github.com/nqd-dev/nqd/registry"
	"github.com/nqd-dev/nqd/store"
)

// backend is what a registry runs on, and what the tests read back.
type backend interface {
	registry.Store
	registry.KV
	Range(ctx context.Context, c store.Context, q store.RangeQuery) ([]event.Event, error)
	Info(ctx context.Context, c store.Context) (store.StreamInfo, error)
}

// fixture is two registry instances on one backend, on one test clock.
type fixture struct {
	st    backend
	a, b  *registry.Registry
	clock *testkit.Clock
}

const interval = 15 * time.Second

// newFixture opens two stores of one backend sharing their data, as two
// nqd instances do (the embedded store, which one process owns, is the
// same store twice: two registries over it are two instances as far as the
// registry can tell).
func newFixture(t *testing.T, b backendtest.Backend) *fixture {
	t.Helper()
	var st1, st2 backend = b.Open(t), b.Open(t)
	clock := testkit.NewClock(time.Now())
	opts := registry.Options{Interval: interval, Now: clock.Now, Log: testkit.Logger(t)}
	return &fixture{st: st1, a: registry.New(st1, st1, opts), b: registry.New(st2, st2, opts), clock: clock}
}

// kinds lists the registry stream's event kinds, oldest first.
func (f *fixture) kinds(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, e := range f.events(t) {
		out = append(out, e.Kind)
	}
	return out
}

func (f *fixture) events(t *testing.T) []event.Event {
	t.Helper()
	evs, err := f.st.Range(t.Context(), registry.Stream, store.RangeQuery{})
	if err != nil {
		t.Fatalf("range: %v", err)
	}
	return evs
}

// workers folds the registry stream.
func (f *fixture) workers(t *testing.T) map[string]reducers.Worker {
	t.Helper()
	s, err := reducers.Fold(reducers.For(registry.Stream.Type), f.events(t))
	if err != nil {
		t.Fatalf("fold: %v", err)
	}
	out := map[string]reducers.Worker{}
	for _, w := range s.(*reducers.WorkersState).Workers() {
		out[w.ID] = w
	}
	return out
}

func hello(id string) registry.Hello {
	return registry.Hello{ID: id, Name: "demo", SDK: "go", Version: "1.2.3", Host: "box-1",
		Queues: []string{"email", "resize"}, Concurrency: 8, Transport: registry.TransportChannel}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantKinds(t *testing.T, f *fixture, want ...string) {
	t.Helper()
	if diff := cmp.Diff(want, f.kinds(t)); diff != "" {
		t.Fatalf("registry events (-want +got):\n%s", diff)
	}
}

// TestRegistry runs every scenario on every backend, two instances each.
func TestRegistry(t *testing.T) {
	scenarios := map[string]func(t *testing.T, f *fixture){
		"arrival is one event however often and wherever it is said": func(t *testing.T, f *fixture) {
			ctx := t.Context()
			must(t, f.a.Arrive(ctx, hello("w1")))
			must(t, f.a.Arrive(ctx, hello("w1")))
			must(t, f.b.Arrive(ctx, hello("w1")))
			wantKinds(t, f, registry.KindRegistered)
			w := f.workers(t)["w1"]
			if w.Status != reducers.WorkerActive || w.SDK != "go" || w.Concurrency != 8 || len(w.Queues) != 2 {
				t.Fatalf("worker = %+v", w)
			}
		},
		"heartbeats are coalesced to one per interval across instances": func(t *testing.T, f *fixture) {
			ctx := t.Context()
			must(t, f.a.Arrive(ctx, hello("w1")))
			must(t, f.b.Arrive(ctx, hello("w1")))
			for i := range 5 {
				must(t, f.a.Beat(ctx, "w1", i))
				must(t, f.b.Beat(ctx, "w1", i))
			}
			wantKinds(t, f, registry.KindRegistered)
			f.clock.Add(interval)
			var wg sync.WaitGroup
			for _, r := range []*registry.Registry{f.a, f.b} {
				wg.Go(func() { must(t, r.Beat(ctx, "w1", 3)) })
			}
			wg.Wait()
			wantKinds(t, f, registry.KindRegistered, registry.KindHeartbeat)
			if w := f.workers(t)["w1"]; w.InFlight != 3 {
				t.Fatalf("in flight = %d, want 3", w.InFlight)
			}
		},
		"a beat of a worker that never arrived here is refused": func(t *testing.T, f *fixture) {
			if err := f.a.Beat(t.Context(), "nobody", 1); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("beat = %v, want ErrNotFound", err)
			}
		},
		"departure is one event though both instances say it": func(t *testing.T, f *fixture) {
			ctx := t.Context()
			must(t, f.a.Arrive(ctx, hello("w1")))
			must(t, f.b.Arrive(ctx, hello("w1")))
			var wg sync.WaitGroup
			for _, r := range []*registry.Registry{f.a, f.b} {
				wg.Go(func() { must(t, r.Leave(ctx, "w1", registry.ReasonClosed)) })
			}
			wg.Wait()
			must(t, f.a.Leave(ctx, "never-here", "server shutdown"))
			wantKinds(t, f, registry.KindRegistered, registry.KindLeft)
			if w := f.workers(t)["w1"]; w.Status != reducers.WorkerLeft || w.Reason != registry.ReasonClosed {
				t.Fatalf("worker = %+v", w)
			}
			if _, err := f.st.Get(ctx, "nqd.worker.w1"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("record after departure: %v", err)
			}
		},
		"a silent worker is lost once, whichever instances sweep": func(t *testing.T, f *fixture) {
			ctx := t.Context()
			must(t, f.a.Arrive(ctx, hello("w1")))
			must(t, f.a.Arrive(ctx, hello("w2")))
			seen := f.clock.Now()
			f.clock.Add(f.a.LostAfter() - time.Millisecond)
			must(t, f.a.Beat(ctx, "w2", 1)) // w2 keeps talking
			must(t, f.a.Sweep(ctx))
			wantKinds(t, f, registry.KindRegistered, registry.KindRegistered, registry.KindHeartbeat)
			f.clock.Add(time.Millisecond)
			var wg sync.WaitGroup
			for _, r := range []*registry.Registry{f.a, f.b, f.a, f.b} {
				wg.Go(func() { must(t, r.Sweep(ctx)) })
			}
			wg.Wait()
			wantKinds(t, f, registry.KindRegistered, registry.KindRegistered, registry.KindHeartbeat, registry.KindLeft)
			ws := f.workers(t)
			if w := ws["w1"]; w.Status != reducers.WorkerLost || w.LastSeen.UnixMilli() != seen.UnixMilli() {
				t.Fatalf("w1 = %+v, want lost, last seen %v", w, seen)
			}
			if w := ws["w2"]; w.Status != reducers.WorkerActive {
				t.Fatalf("w2 = %+v, want active", w)
			}
		},
		"a lost worker that speaks again arrives again": func(t *testing.T, f *fixture) {
			ctx := t.Context()
			must(t, f.a.Arrive(ctx, hello("w1")))
			f.clock.Add(f.a.LostAfter())
			must(t, f.b.Sweep(ctx))
			// a has not swept, so it still holds w1's hello.
			must(t, f.a.Beat(ctx, "w1", 2))
			wantKinds(t, f, registry.KindRegistered, registry.KindLeft, registry.KindRegistered)
			if w := f.workers(t)["w1"]; w.Status != reducers.WorkerActive || w.InFlight != 2 {
				t.Fatalf("w1 = %+v, want active with 2 in flight", w)
			}
		},
		"an HTTP worker arrives by its first call and beats by the others": func(t *testing.T, f *fixture) {
			ctx := t.Context()
			h := hello("http-1")
			h.Transport = registry.TransportHTTP
			for range 3 {
				must(t, f.a.Seen(ctx, h, 1))
				must(t, f.b.Seen(ctx, h, 1))
			}
			f.clock.Add(interval)
			must(t, f.b.Seen(ctx, h, 4))
			must(t, f.a.Seen(ctx, h, 4))
			wantKinds(t, f, registry.KindRegistered, registry.KindHeartbeat)
		},
		"the sweep trims events older than the retention": func(t *testing.T, f *fixture) {
			ctx := t.Context()
			must(t, f.a.Arrive(ctx, hello("w1")))
			must(t, f.a.Leave(ctx, "w1", registry.ReasonClosed))
			must(t, f.a.Arrive(ctx, hello("w2")))
			f.clock.Add(2 * registry.DefaultRetain)
			must(t, f.a.Sweep(ctx))
			// w2 is lost by now; the trim keeps the newest event.
			info, err := f.st.Info(ctx, registry.Stream)
			must(t, err)
			if info.Length != 1 {
				t.Fatalf("stream length after trim = %d, want 1 (%v)", info.Length, f.kinds(t))
			}
		},
		"a departure's event carries the whole worker": func(t *testing.T, f *fixture) {
			ctx := t.Context()
			must(t, f.a.Arrive(ctx, hello("w1")))
			must(t, f.a.Leave(ctx, "w1", registry.ReasonClosed))
			evs := f.events(t)
			var got registry.Record
			must(t, json.Unmarshal(evs[len(evs)-1].Data, &got))
			want := registry.Record{Hello: hello("w1"), FirstSeen: f.clock.Now().UnixMilli(), LastSeen: f.clock.Now().UnixMilli(), Reason: registry.ReasonClosed}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("worker.left data (-want +got):\n%s", diff)
			}
		},
	}
	for sname, run := range scenarios {
		t.Run(sname, func(t *testing.T) {
			backendtest.Each(t, backendtest.All, func(t *testing.T, b backendtest.Backend) { run(t, newFixture(t, b)) })
		})
	}
}

func TestCheckRefusesBadHellos(t *testing.T) {
	long := string(make([]byte, 200))
	for name, tc := range map[string]struct {
		edit  func(*registry.Hello)
		field string
	}{
		"id with a colon":     {func(h *registry.Hello) { h.ID = "a:b" }, "id"},
		"empty id":            {func(h *registry.Hello) { h.ID = "" }, "id"},
		"name too long":       {func(h *registry.Hello) { h.Name = long }, "name"},
		"control in version":  {func(h *registry.Hello) { h.Version = "1\n2" }, "version"},
		"queue with a star":   {func(h *registry.Hello) { h.Queues = []string{"a*"} }, "queues"},
		"negative concurrent": {func(h *registry.Hello) { h.Concurrency = -1 }, "concurrency"},
		"unknown transport":   {func(h *registry.Hello) { h.Transport = "pigeon" }, "transport"},
	} {
		t.Run(name, func(t *testing.T) {
			h := hello("w1")
			tc.edit(&h)
			var e *nqd.Error
			if err := registry.Check(h); !errors.As(err, &e) || e.Fields[tc.field] == "" {
				t.Fatalf("Check = %v, want a rule for %s", err, tc.field)
			}
		})
	}
	if err := registry.Check(hello("w1")); err != nil {
		t.Fatalf("a good hello: %v", err)
	}
}
