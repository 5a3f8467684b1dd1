package reducers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/nqd-dev/nqd/event"
)

// This file is the trigger registry's fold: a named trigger (a webhook,
// event, schedule or manual trigger a flow subscribes to) keeps its whole
// life in its own trigger stream, and its state is the fold of that stream.
// A trigger stream is a registry trigger once a trigger.registered names a
// scope, which the await triggers of a run never do; from then on the
// stream's events fold into Registered.

// The registry's event kinds.
const (
	KindTriggerRegistered   = "trigger.registered"
	KindTriggerUpdated      = "trigger.updated"
	KindTriggerDeleted      = "trigger.deleted"
	KindTriggerFired        = "trigger.fired"
	KindSubscriptionAdded   = "subscription.added"
	KindSubscriptionRemoved = "subscription.removed"
	// KindTriggerFlowStarted and KindTriggerFlowFailed record, per
	// subscribed flow, whether a fire started it.
	KindTriggerFlowStarted = "trigger.flow.started"
	KindTriggerFlowFailed  = "trigger.flow.failed"
)

// RecentFires is how many fire times a registered trigger keeps, enough to
// count the fires of a recent window such as the last 24 hours when fires
// are rare, and bounded when they are not.
const RecentFires = 100

// TriggerSpec is what a trigger's registration or update says of it: the
// data of trigger.registered and trigger.updated.
type TriggerSpec struct {
	Name         string          `json:"name"`
	Type         string          `json:"type"`
	Scope        string          `json:"scope"`
	DisplayName  string          `json:"displayName,omitempty"`
	Description  string          `json:"description,omitempty"`
	Source       string          `json:"source,omitempty"`
	Status       string          `json:"status"`
	Config       json.RawMessage `json:"config,omitempty"`
	RegisteredBy string          `json:"registeredBy,omitempty"`
	// SecretHash is the hex SHA-256 of the secret a webhook call must
	// carry; the secret itself is never stored.
	SecretHash string `json:"secretHash,omitempty"`
}

// Subscription is a flow subscribed to a trigger.
type Subscription struct {
	FlowName     string `json:"flowName"`
	Mode         string `json:"mode"`
	Source       string `json:"source,omitempty"`
	RegisteredAt Time   `json:"registeredAt"`
}

// subscriptionData is the data of subscription.added and .removed.
type subscriptionData struct {
	FlowName string `json:"flowName"`
	Mode     string `json:"mode"`
	Source   string `json:"source"`
}

// Registered is a registry trigger's state. It is part of an immutable
// TriggerState: a fold replaces it, never changes it.
type Registered struct {
	Spec           TriggerSpec `json:"spec"`
	RegisteredAt   Time        `json:"registeredAt"`
	LastActivityAt Time        `json:"lastActivityAt"`
	// ActiveSince is when the trigger last became active with its current
	// event kind: an event trigger fires for events appended after it.
	ActiveSince Time `json:"activeSince"`
	// Version counts the registration and its updates.
	Version       int            `json:"version"`
	Deleted       bool           `json:"deleted,omitempty"`
	Subscriptions []Subscription `json:"subscriptions,omitempty"` // by flow name
	Fires         int64          `json:"fires,omitempty"`
	FlowsStarted  int64          `json:"flowsStarted,omitempty"`
	FlowsFailed   int64          `json:"flowsFailed,omitempty"`
	LastFiredAt   Time           `json:"lastFiredAt"`
	// RecentFires are the times (epoch ms) of the newest fires, oldest
	// first, at most RecentFires of them.
	RecentFires []int64 `json:"recentFires,omitempty"`
}

// registrySpec returns the spec a trigger.registered carries when it
// registers a registry trigger.
func registrySpec(ev event.Event) (TriggerSpec, bool) {
	if ev.Kind != KindTriggerRegistered || !bytes.Contains(ev.Data, []byte(`"scope"`)) {
		return TriggerSpec{}, false
	}
	var sp TriggerSpec
	if err := json.Unmarshal(ev.Data, &sp); err != nil || sp.Scope == "" {
		return TriggerSpec{}, false
	}
	return sp, true
}

// applyRegistry folds ev into a registry trigger, replacing s.Registry.
func (s *TriggerState) applyRegistry(ev event.Event) {
	t := Time{ev.Time()}
	if sp, ok := registrySpec(ev); ok {
		s.Registry = &Registered{Spec: sp, RegisteredAt: t, LastActivityAt: t, ActiveSince: t, Version: 1}
		return
	}
	r := *s.Registry
	r.LastActivityAt = t
	switch ev.Kind {
	case KindTriggerUpdated:
		var sp TriggerSpec
		if json.Unmarshal(ev.Data, &sp) != nil {
			s.Ignored++
			return
		}
		sp.Name, sp.Type = r.Spec.Name, r.Spec.Type
		if sp.Scope == "" {
			sp.Scope = r.Spec.Scope
		}
		if sp.Status != r.Spec.Status || eventKindOf(sp.Config) != eventKindOf(r.Spec.Config) {
			r.ActiveSince = t
		}
		r.Spec = sp
		r.Version++
	case KindTriggerDeleted:
		r.Deleted = true
	case KindSubscriptionAdded, KindSubscriptionRemoved:
		var d subscriptionData
		if json.Unmarshal(ev.Data, &d) != nil || d.FlowName == "" {
			s.Ignored++
			return
		}
		subs := slices.DeleteFunc(slices.Clone(r.Subscriptions), func(x Subscription) bool { return x.FlowName == d.FlowName })
		if ev.Kind == KindSubscriptionAdded {
			mode := d.Mode
			if mode == "" {
				mode = "auto"
			}
			subs = append(subs, Subscription{FlowName: d.FlowName, Mode: mode, Source: d.Source, RegisteredAt: t})
			slices.SortFunc(subs, func(a, b Subscription) int { return strings.Compare(a.FlowName, b.FlowName) })
		}
		r.Subscriptions = subs
	case KindTriggerFired:
		r.Fires++
		r.LastFiredAt = t
		recent := r.RecentFires
		if len(recent) >= RecentFires {
			recent = recent[len(recent)-RecentFires+1:]
		}
		r.RecentFires = append(slices.Clone(recent), ev.Time().UnixMilli())
	case KindTriggerFlowStarted:
		r.FlowsStarted++
	case KindTriggerFlowFailed:
		r.FlowsFailed++
	default:
		s.Ignored++
	}
	s.Registry = &r
}

// eventKindOf is the `event` an event trigger's config names.
func eventKindOf(config json.RawMessage) string {
	var c struct {
		Event string `json:"event"`
	}
	_ = json.Unmarshal(config, &c)
	return c.Event
}

// validate checks a registry trigger's invariants.
func (r *Registered) validate() error {
	if r.Spec.Name == "" || r.Spec.Scope == "" || r.Version < 1 {
		return fmt.Errorf("registry trigger %q scope %q version %d", r.Spec.Name, r.Spec.Scope, r.Version)
	}
	if r.Fires < 0 || r.FlowsStarted < 0 || r.FlowsFailed < 0 || len(r.RecentFires) > RecentFires {
		return fmt.Errorf("registry trigger %q counts", r.Spec.Name)
	}
	return nil
}

func (r *Registered) approxSize() int {
	n := sizeState + len(r.Spec.Name) + len(r.Spec.DisplayName) + len(r.Spec.Description) + len(r.Spec.Config) + 8*len(r.RecentFires)
	for _, sub := range r.Subscriptions {
		n += sizeEntry + len(sub.FlowName) + len(sub.Source)
	}
	return n
}

// registryWire is a registry trigger's state as the state routes answer it.
type registryWire struct {
	*Registered
	LastEventID string `json:"lastEventId,omitempty"`
	EventCount  int    `json:"eventCount"`
	Ignored     int    `json:"ignored,omitempty"`
}
