package reducers_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/reducers"
)

func TestRegistryTriggerApply(t *testing.T) {
	reg := ev(1000, "trigger.registered", data(`{"name":"t","type":"webhook","scope":"flow","status":"active","config":{"path":"/h"}}`))
	added := ev(1001, "subscription.added", data(`{"flowName":"f","mode":"auto","source":"ui"}`))
	fired := ev(1002, "trigger.fired", data(`{"fireId":"x"}`))
	runApplyCases(t, reducers.Trigger{}, []applyCase{
		{
			name: "a registration with a scope makes a registry trigger",
			ev:   reg,
			want: `{"spec":{"name":"t","type":"webhook","scope":"flow","status":"active","config":{"path":"/h"}},"version":1,"registeredAt":"1970-01-01T00:00:01.000Z","eventCount":1}`,
		},
		{
			name:  "subscriptions are kept by flow",
			prior: []event.Event{reg},
			ev:    added,
			want:  `{"subscriptions":[{"flowName":"f","mode":"auto","source":"ui","registeredAt":"1970-01-01T00:00:01.001Z"}]}`,
		},
		{
			name:  "a removal drops the subscription",
			prior: []event.Event{reg, added},
			ev:    ev(1002, "subscription.removed", data(`{"flowName":"f"}`)),
			want:  `{"subscriptions":null,"lastActivityAt":"1970-01-01T00:00:01.002Z"}`,
		},
		{
			name:  "fires are counted and timed",
			prior: []event.Event{reg, added},
			ev:    fired,
			want:  `{"fires":1,"lastFiredAt":"1970-01-01T00:00:01.002Z","recentFires":[1002]}`,
		},
		{
			name:  "flow starts and failures are counted",
			prior: []event.Event{reg, added, fired},
			ev:    ev(1003, "trigger.flow.failed", data(`{"flowName":"f"}`)),
			want:  `{"fires":1,"flowsFailed":1}`,
		},
		{
			name:  "an update replaces the spec but not name and type",
			prior: []event.Event{reg},
			ev:    ev(1001, "trigger.updated", data(`{"name":"x","type":"event","status":"inactive","description":"d"}`)),
			want:  `{"spec":{"name":"t","type":"webhook","scope":"flow","status":"inactive","description":"d"},"version":2,"activeSince":"1970-01-01T00:00:01.001Z"}`,
		},
		{
			name:  "a deletion marks it deleted",
			prior: []event.Event{reg, added},
			ev:    ev(1002, "trigger.deleted"),
			want:  `{"deleted":true,"subscriptions":[{"flowName":"f","mode":"auto","source":"ui","registeredAt":"1970-01-01T00:00:01.001Z"}]}`,
		},
		{
			name:  "a registration after a deletion starts afresh",
			prior: []event.Event{reg, added, ev(1002, "trigger.deleted")},
			ev:    ev(1003, "trigger.registered", data(`{"name":"t","type":"manual","scope":"run","status":"active"}`)),
			want:  `{"deleted":null,"subscriptions":null,"spec":{"name":"t","type":"manual","scope":"run","status":"active"},"version":1}`,
		},
	})
}

// TestRegistryTriggerCheckpoint: a registry trigger's state survives a
// checkpoint, so a fold continued from it gives the same state.
func TestRegistryTriggerCheckpoint(t *testing.T) {
	evs := []event.Event{
		ev(1000, "trigger.registered", data(`{"name":"t","type":"event","scope":"flow","status":"active","config":{"event":"a.b"}}`)),
		ev(1001, "subscription.added", data(`{"flowName":"f","mode":"auto"}`)),
		ev(1002, "trigger.fired", data(`{"fireId":"x"}`)),
		ev(1003, "trigger.flow.started", data(`{"flowName":"f","runId":"r"}`)),
	}
	whole := mustFold(t, reducers.Trigger{}, evs...)
	half := mustFold(t, reducers.Trigger{}, evs[:2]...)
	b, err := reducers.MarshalCheckpoint(half)
	if err != nil {
		t.Fatal(err)
	}
	back, err := reducers.UnmarshalCheckpoint(reducers.Trigger{}, b)
	if err != nil {
		t.Fatal(err)
	}
	cont, err := reducers.Trigger{}.Fold(back, evs[2:])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fieldsOf(t, whole), fieldsOf(t, cont)); diff != "" {
		t.Errorf("continued from a checkpoint (-whole +continued):\n%s", diff)
	}
}
