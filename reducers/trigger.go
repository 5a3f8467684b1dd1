package reducers

import (
	"encoding/json"
	"fmt"

	"github.com/nqd-dev/nqd/event"
)

// Trigger statuses: registered until the first fired, timeout or cancelled
// event ends the trigger (docs/compatibility.md, "Statuses").
const (
	TriggerRegistered = "registered"
	TriggerFired      = "fired"
	TriggerTimeout    = "timeout"
	TriggerCancelled  = "cancelled"
)

// Trigger reduces a trigger's stream (trigger.registered, trigger.fired,
// trigger.timeout, trigger.cancelled). A trigger ends once: the first
// trigger.fired, trigger.timeout or trigger.cancelled decides, so a timeout
// racing a fire cannot undo it. A later trigger.registered arms it again, for
// triggers that are registered more than once.
type Trigger struct{}

// TriggerState is the state of a trigger. It is immutable.
type TriggerState struct {
	position
	Status        string
	Trigger       string          // the trigger id
	Type          string          // webhook, user, api, ...
	Config        json.RawMessage // data.config, else the whole registration payload
	CorrelationID string          // the run the trigger resumes
	RegisteredAt  Time
	EndedAt       Time // when it fired, timed out or was cancelled
	Payload       json.RawMessage
	Source        string
	Reason        string
	Duration      int64 // ms, from trigger.timeout
	Fired         int   // trigger.fired events seen, repeats included
	Ignored       int
	// Registry is set for a trigger of the trigger registry (registry.go),
	// whose stream folds into it instead.
	Registry *Registered
}

type triggerWire struct {
	Status        string          `json:"status"`
	Trigger       string          `json:"trigger,omitempty"`
	Type          string          `json:"type,omitempty"`
	Config        json.RawMessage `json:"config,omitempty"`
	CorrelationID string          `json:"correlationId,omitempty"`
	RegisteredAt  Time            `json:"registeredAt,omitzero"`
	FiredAt       Time            `json:"firedAt,omitzero"`
	EndedAt       Time            `json:"endedAt,omitzero"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	Source        string          `json:"source,omitempty"`
	Reason        string          `json:"reason,omitempty"`
	Duration      int64           `json:"duration,omitempty"`
	Fired         int             `json:"fired"`
	LastEventID   string          `json:"lastEventId,omitempty"`
	EventCount    int             `json:"eventCount"`
	Ignored       int             `json:"ignored,omitempty"`
}

// MarshalJSON writes the state the API returns for a trigger context; firedAt
// repeats endedAt for fired triggers, under the name clients read for it.
func (s *TriggerState) MarshalJSON() ([]byte, error) {
	if s.Registry != nil {
		w := registryWire{Registered: s.Registry, EventCount: s.count, Ignored: s.Ignored}
		if s.count > 0 {
			w.LastEventID = formatID(s.last)
		}
		return json.Marshal(w)
	}
	w := triggerWire{
		Status: s.Status, Trigger: s.Trigger, Type: s.Type, Config: s.Config,
		CorrelationID: s.CorrelationID, RegisteredAt: s.RegisteredAt, EndedAt: s.EndedAt,
		Payload: s.Payload, Source: s.Source, Reason: s.Reason, Duration: s.Duration,
		Fired: s.Fired, EventCount: s.count, Ignored: s.Ignored,
	}
	if s.Status == TriggerFired {
		w.FiredAt = s.EndedAt
	}
	if s.count > 0 {
		w.LastEventID = formatID(s.last)
	}
	return json.Marshal(w)
}

// Validate checks the invariants every fold must keep.
func (s *TriggerState) Validate() error {
	if err := s.position.validate(s.Ignored); err != nil {
		return err
	}
	if s.Registry != nil {
		return s.Registry.validate()
	}
	switch s.Status {
	case TriggerRegistered:
		if !s.EndedAt.IsZero() {
			return fmt.Errorf("registered trigger ended at %v", s.EndedAt)
		}
	case TriggerFired, TriggerTimeout, TriggerCancelled:
		if s.EndedAt.IsZero() {
			return fmt.Errorf("%s trigger without an end", s.Status)
		}
	default:
		return fmt.Errorf("trigger status %q", s.Status)
	}
	if s.Fired < 0 || s.Fired > s.count || s.Duration < 0 {
		return fmt.Errorf("fired %d, duration %d", s.Fired, s.Duration)
	}
	return nil
}

// Init returns the state of a trigger with no events.
func (Trigger) Init() State { return newTriggerState() }

func newTriggerState() *TriggerState { return &TriggerState{Status: TriggerRegistered} }

// Apply folds one event into s. See Reducer.
func (r Trigger) Apply(s State, ev event.Event) (State, error) {
	return r.Fold(s, []event.Event{ev})
}

// Fold folds evs into s. See Reducer. A trigger state has no shared parts,
// so copying it per event costs one struct copy.
func (r Trigger) Fold(s State, evs []event.Event) (State, error) {
	return foldCopy(s, evs, newTriggerState, func(next *TriggerState) func(event.Event) { return next.apply })
}

func (s *TriggerState) apply(ev event.Event) {
	s.advance(ev)
	if _, ok := registrySpec(ev); ok || s.Registry != nil {
		s.applyRegistry(ev)
		return
	}
	t := Time{ev.Time()}
	if s.Trigger == "" {
		s.Trigger = firstText(ev.Trigger, ev.Subject)
	}
	if s.CorrelationID == "" {
		s.CorrelationID = ev.CorrelationID
	}
	var d triggerData
	decode(ev.Data, &d, d.set)
	switch ev.Kind {
	case "trigger.registered":
		s.Status, s.RegisteredAt, s.EndedAt = TriggerRegistered, t, Time{}
		s.Type = firstText(d.Type, s.Type)
		if s.Config = rawValue(d.Config); s.Config == nil {
			s.Config = rawValue(ev.Data)
		}
		if ev.CorrelationID != "" {
			s.CorrelationID = ev.CorrelationID
		}
		s.Payload, s.Source, s.Reason, s.Duration = nil, "", "", 0
	case "trigger.fired":
		s.Fired++
		if s.end(TriggerFired, t) {
			s.Payload, s.Source = rawValue(d.Payload), d.Source
		}
	case "trigger.timeout":
		if s.end(TriggerTimeout, t) {
			s.Duration = max(0, int64(d.Duration))
		}
	case "trigger.cancelled", "trigger.canceled", "trigger.cancel":
		if s.end(TriggerCancelled, t) {
			s.Reason = string(d.Reason)
		}
	default:
		s.Ignored++
	}
}

// end moves a registered trigger to status and reports whether it did.
func (s *TriggerState) end(status string, t Time) bool {
	if s.Status != TriggerRegistered {
		return false
	}
	s.Status, s.EndedAt = status, t
	return true
}
