package triggers_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/snapshots"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/triggers"
)

// instance is one nqd instance's registry and engine on a store.
type instance struct {
	st  engine.Store
	eng *engine.Engine
	reg *triggers.Registry
}

func newInstance(t *testing.T, st engine.Store) instance {
	states := snapshots.New(st, snapshots.Options{Logger: testkit.Logger(t)})
	t.Cleanup(func() { _ = states.Close() })
	eng := engine.New(st, engine.Options{Logger: testkit.Logger(t)})
	return instance{st: st, eng: eng, reg: triggers.New(st, states, eng, triggers.Options{Logger: testkit.Logger(t)})}
}

// forEachBackend runs f on two instances on one store of each backend, as
// two nqd instances would share it (the embedded store is one instance, so
// both have the same store).
func forEachBackend(t *testing.T, f func(t *testing.T, a, b instance)) {
	backendtest.Each(t, backendtest.All, func(t *testing.T, be backendtest.Backend) {
		f(t, newInstance(t, be.Open(t)), newInstance(t, be.Open(t)))
	})
}

func define(t *testing.T, e *engine.Engine, name string) {
	t.Helper()
	defs, err := flows.LoadDir("../flows/testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		if d.Name == "diamond" {
			d.Name = name
			if err := e.PutDefinition(t.Context(), d); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("no diamond flow in testdata")
}

func TestRegistryRoundTrip(t *testing.T) {
	forEachBackend(t, func(t *testing.T, a, _ instance) {
		ctx := t.Context()
		saved, err := a.reg.Create(ctx, triggers.Spec{
			Name: "orders", Type: triggers.TypeWebhook, DisplayName: "Orders", Description: "new orders",
			Config: json.RawMessage(`{"path":"/hooks/orders","method":"post","requireAuth":true}`), Subscriptions: []string{"f1", "f2", "f1"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(saved.Secret) != 64 {
			t.Errorf("generated secret %q, want 64 hex characters", saved.Secret)
		}
		got := saved.Trigger
		if got.Name != "orders" || got.Scope != triggers.ScopeFlow || got.Status != triggers.StatusActive || got.Source != "ui" ||
			got.Version != 1 || !cmp.Equal(got.SubscribedFlows, []string{"f1", "f2"}) || got.SubscriptionCount != 2 {
			t.Errorf("created %+v", got)
		}
		want := &triggers.Webhook{Path: "/hooks/orders", Method: "POST", Auth: &triggers.WebhookAuth{Header: "X-API-Key"}}
		if diff := cmp.Diff(want, got.Webhook); diff != "" {
			t.Errorf("webhook (-want +got):\n%s", diff)
		}
		if !got.CheckSecret(saved.Secret) || got.CheckSecret("not-the-secret-at-all") {
			t.Error("CheckSecret does not tell the secret from another")
		}

		if _, err := a.reg.Create(ctx, triggers.Spec{Name: "daily", Type: triggers.TypeSchedule, Config: json.RawMessage(`{"cron":"0 9 * * *"}`)}); err != nil {
			t.Fatal(err)
		}
		list, err := a.reg.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 {
			t.Fatalf("listed %d triggers, want 2", len(list))
		}

		inactive, subs := triggers.StatusInactive, []string{"f2", "f3"}
		up, err := a.reg.Update(ctx, "orders", triggers.Patch{Status: &inactive, Subscriptions: &subs, Config: json.RawMessage(`{"method":"PUT"}`)})
		if err != nil {
			t.Fatal(err)
		}
		if up.Secret != "" {
			t.Error("an update that keeps the secret told a new one")
		}
		u := up.Trigger
		if u.Status != inactive || u.Version != 2 || !cmp.Equal(u.SubscribedFlows, []string{"f2", "f3"}) || u.Webhook.Method != "PUT" ||
			u.Webhook.Path != "/hooks/orders" || !u.CheckSecret(saved.Secret) {
			t.Errorf("updated %+v %+v", u, u.Webhook)
		}

		page, err := a.reg.Events(ctx, "orders", triggers.EventQuery{Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, r := range page.Events {
			kinds = append(kinds, r.Type)
			if r.TS <= 0 || r.TriggerName != "orders" {
				t.Errorf("record %+v", r)
			}
		}
		// Created: registered, 2 added; updated: updated, f1 removed, f3 added.
		if want := []string{"subscription.added", "subscription.removed", "trigger.updated"}; !cmp.Equal(kinds, want) {
			t.Errorf("newest events %v, want %v", kinds, want)
		}
		if page.Total != 6 || !page.HasMore || page.Count != 3 {
			t.Errorf("page %+v", page)
		}
		typed, err := a.reg.Events(ctx, "orders", triggers.EventQuery{Limit: 10, Offset: 1, Types: []string{"subscription.added"}})
		if err != nil || typed.Total != 3 || typed.Count != 2 || typed.HasMore {
			t.Errorf("typed page %+v, %v", typed, err)
		}

		if err := a.reg.Delete(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.reg.Get(ctx, "orders"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get after delete: %v, want not found", err)
		}
		if err := a.reg.Delete(ctx, "orders"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("second delete: %v, want not found", err)
		}
		again, err := a.reg.Create(ctx, triggers.Spec{Name: "orders", Type: triggers.TypeManual})
		if err != nil || again.Trigger.Type != triggers.TypeManual || again.Trigger.SubscriptionCount != 0 {
			t.Errorf("registered again: %+v, %v", again.Trigger, err)
		}
	})
}

func TestCreateRefusesBadInputAndStoresNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, a, _ instance) {
		ctx := t.Context()
		bad := map[string]triggers.Spec{
			"name":         {Name: "bad name", Type: triggers.TypeManual},
			"key":          {Name: "a:b", Type: triggers.TypeManual},
			"signed id":    {Name: "tg1.k.x.y.z", Type: triggers.TypeManual},
			"type":         {Name: "t", Type: "cron"},
			"event":        {Name: "t", Type: triggers.TypeEvent},
			"own kind":     {Name: "t", Type: triggers.TypeEvent, Config: json.RawMessage(`{"event":"trigger.fired"}`)},
			"filter":       {Name: "t", Type: triggers.TypeEvent, Config: json.RawMessage(`{"event":"a.b","filter":"event.data.x ==="}`)},
			"cron":         {Name: "t", Type: triggers.TypeSchedule, Config: json.RawMessage(`{"cron":"every day"}`)},
			"no timing":    {Name: "t", Type: triggers.TypeSchedule, Config: json.RawMessage(`{}`)},
			"timezone":     {Name: "t", Type: triggers.TypeSchedule, Config: json.RawMessage(`{"interval":60,"timezone":"Mars/Olympus"}`)},
			"method":       {Name: "t", Type: triggers.TypeWebhook, Config: json.RawMessage(`{"method":"TRACE"}`)},
			"short secret": {Name: "t", Type: triggers.TypeWebhook, Config: json.RawMessage(`{"requireAuth":true,"secret":"abc"}`)},
			"scope":        {Name: "t", Type: triggers.TypeManual, Scope: "world"},
			"status":       {Name: "t", Type: triggers.TypeManual, Status: "paused"},
			"flow":         {Name: "t", Type: triggers.TypeManual, Subscriptions: []string{"a b"}},
			"config":       {Name: "t", Type: triggers.TypeWebhook, Config: json.RawMessage(`[1]`)},
		}
		for name, sp := range bad {
			_, err := a.reg.Create(ctx, sp)
			if nqd.ErrorCode(err) != nqd.CodeValidation {
				t.Errorf("%s: %v, want a validation error", name, err)
			}
		}
		list, err := a.reg.List(ctx)
		if err != nil || len(list) != 0 {
			t.Errorf("listed %v, %v after refused creates", list, err)
		}
		info, err := a.st.Info(ctx, triggers.Context("t"))
		if err != nil || info.Length != 0 {
			t.Errorf("stream of t: %+v, %v; want empty", info, err)
		}
		if _, err := a.reg.Create(ctx, triggers.Spec{Name: "t", Type: triggers.TypeManual}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.reg.Create(ctx, triggers.Spec{Name: "t", Type: triggers.TypeManual}); !errors.Is(err, triggers.ErrExists) {
			t.Errorf("second create: %v, want ErrExists", err)
		}
		if _, err := a.reg.Update(ctx, "t", triggers.Patch{Status: new("paused")}); nqd.ErrorCode(err) != nqd.CodeValidation {
			t.Errorf("bad status update: %v", err)
		}
		if info, _ := a.st.Info(ctx, triggers.Context("t")); info.Length != 1 {
			t.Errorf("stream of t holds %d events after a refused update, want 1", info.Length)
		}
	})
}

func TestFireStartsSubscribedFlows(t *testing.T) {
	forEachBackend(t, func(t *testing.T, a, _ instance) {
		ctx := t.Context()
		define(t, a.eng, "f")
		if _, err := a.reg.Create(ctx, triggers.Spec{Name: "go", Type: triggers.TypeManual, Subscriptions: []string{"f", "missing"}}); err != nil {
			t.Fatal(err)
		}
		fired, err := a.reg.Fire(ctx, "go", json.RawMessage(`{"n":1}`), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		run := fired.Started["f"]
		if run == "" || fired.Failed["missing"] == "" {
			t.Fatalf("fired %+v", fired)
		}
		if m, err := a.st.RunMeta(ctx, "f", run); err != nil || m.Status == "" {
			t.Errorf("run %s: %+v, %v", run, m, err)
		}
		// The same fire again starts nothing more.
		again, err := a.reg.Fire(ctx, "go", json.RawMessage(`{"n":1}`), fired.FireID, nil)
		if err != nil || again.Started["f"] != run {
			t.Errorf("fire again: %+v, %v", again, err)
		}
		got, err := a.reg.Get(ctx, "go")
		if err != nil {
			t.Fatal(err)
		}
		s := got.Stats
		if s.TotalFires != 1 || s.TotalFlowsStarted != 1 || s.FailureCount != 1 || s.SuccessRate != 50 || s.Last24h != 1 || s.LastFiredAt == "" {
			t.Errorf("stats %+v", s)
		}
		inactive := triggers.StatusInactive
		if _, err := a.reg.Update(ctx, "go", triggers.Patch{Status: &inactive}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.reg.Fire(ctx, "go", nil, "", nil); !errors.Is(err, triggers.ErrNotActive) {
			t.Errorf("fire of an inactive trigger: %v", err)
		}
	})
}

func TestEventTriggerFiresOnAppend(t *testing.T) {
	forEachBackend(t, func(t *testing.T, a, b instance) {
		ctx := t.Context()
		define(t, a.eng, "f")
		if _, err := a.reg.Create(ctx, triggers.Spec{Name: "on-order", Type: triggers.TypeEvent,
			Config: json.RawMessage(`{"event":"order.created","filter":{"region":"eu"}}`), Subscriptions: []string{"f"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.reg.Create(ctx, triggers.Spec{Name: "big-order", Type: triggers.TypeEvent,
			Config: json.RawMessage(`{"event":"order.created","filter":"event.data.total > 100"}`)}); err != nil {
			t.Fatal(err)
		}
		appendEvent := func(data string) {
			t.Helper()
			_, err := a.st.Append(ctx, store.Context{Type: "order", ID: "o1"}, []event.Event{{Kind: "order.created", Data: json.RawMessage(data)}}, store.AppendOptions{})
			if err != nil {
				t.Fatal(err)
			}
		}
		appendEvent(`{"region":"eu","total":50}`)
		appendEvent(`{"region":"us","total":500}`)
		if err := a.reg.Look(ctx, triggers.NewWatcher()); err != nil {
			t.Fatal(err)
		}
		// Another instance looking at the same events fires nothing more.
		if err := b.reg.Look(ctx, triggers.NewWatcher()); err != nil {
			t.Fatal(err)
		}
		on, err := b.reg.Get(ctx, "on-order")
		if err != nil {
			t.Fatal(err)
		}
		if on.Stats.TotalFires != 1 || on.Stats.TotalFlowsStarted != 1 {
			t.Errorf("on-order stats %+v, want one fire that started f", on.Stats)
		}
		runs, err := a.eng.Runs(ctx, "f", "", 0, 10)
		if err != nil || len(runs.Runs) != 1 {
			t.Fatalf("runs of f: %+v, %v; want 1", runs, err)
		}
		big, err := a.reg.Get(ctx, "big-order")
		if err != nil || big.Stats.TotalFires != 1 || big.Stats.TotalFlowsStarted != 0 {
			t.Errorf("big-order %+v, %v; want one fire starting nothing", big.Stats, err)
		}
		page, err := a.reg.Events(ctx, "on-order", triggers.EventQuery{Limit: 10, Types: []string{"trigger.fired"}})
		if err != nil || page.Count != 1 {
			t.Fatalf("fires %+v, %v", page, err)
		}
		var d struct {
			Payload map[string]any `json:"payload"`
		}
		if err := json.Unmarshal(page.Events[0].Data, &d); err != nil || d.Payload["region"] != "eu" {
			t.Errorf("trigger.fired data %s", page.Events[0].Data)
		}
	})
}

func TestRegistrySeenByEveryInstance(t *testing.T) {
	forEachBackend(t, func(t *testing.T, a, b instance) {
		ctx := t.Context()
		if _, err := a.reg.Create(ctx, triggers.Spec{Name: "shared", Type: triggers.TypeWebhook, Subscriptions: []string{"f"}}); err != nil {
			t.Fatal(err)
		}
		desc := "changed on b"
		if _, err := b.reg.Update(ctx, "shared", triggers.Patch{Description: &desc}); err != nil {
			t.Fatal(err)
		}
		ga, err := a.reg.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		gb, err := b.reg.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(ga, gb, cmp.AllowUnexported(triggers.Trigger{}), cmp.Comparer(func(x, y time.Time) bool { return x.Equal(y) })); diff != "" {
			t.Errorf("instances disagree (-a +b):\n%s", diff)
		}
		if len(ga) != 1 || ga[0].Description != desc {
			t.Errorf("a lists %+v", ga)
		}
		if _, err := b.reg.Create(ctx, triggers.Spec{Name: "shared", Type: triggers.TypeManual}); !errors.Is(err, triggers.ErrExists) {
			t.Errorf("create on b of a's trigger: %v, want ErrExists", err)
		}
	})
}
