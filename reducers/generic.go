package reducers

import (
	"encoding/json"
	"fmt"

	"github.com/nqd-dev/nqd/event"
)

// Generic reduces a context of any other type to what every stream has: its
// size, its first and last events and the kinds it holds.
type Generic struct{ Limits Limits }

// GenericState is the state of a context without a dedicated reducer. It is
// immutable.
type GenericState struct {
	position
	First      event.ID
	FirstAt    Time
	LastAt     Time
	OtherKinds int // events whose kind was not counted because Limits.Names kinds were

	kinds map[string]int // shared between states; see flowFold
}

// Kinds returns a copy of the count of events per kind.
func (s *GenericState) Kinds() map[string]int { return cloneOrEmpty(s.kinds) }

type genericWire struct {
	FirstEventID string         `json:"firstEventId,omitempty"`
	FirstEventAt Time           `json:"firstEventAt,omitzero"`
	LastEventID  string         `json:"lastEventId,omitempty"`
	LastEventAt  Time           `json:"lastEventAt,omitzero"`
	EventCount   int            `json:"eventCount"`
	Kinds        map[string]int `json:"kinds"`
	OtherKinds   int            `json:"otherKinds,omitempty"`
}

// MarshalJSON writes the state the API returns for a context of another type.
func (s *GenericState) MarshalJSON() ([]byte, error) {
	w := genericWire{
		FirstEventAt: s.FirstAt, LastEventAt: s.LastAt, EventCount: s.count,
		Kinds: nonNil(s.kinds), OtherKinds: s.OtherKinds,
	}
	if s.count > 0 {
		w.FirstEventID, w.LastEventID = formatID(s.First), formatID(s.last)
	}
	return json.Marshal(w)
}

// Validate checks the invariants every fold must keep.
func (s *GenericState) Validate() error {
	if err := s.position.validate(0); err != nil {
		return err
	}
	n := s.OtherKinds
	for kind, c := range s.kinds {
		if c < 1 {
			return fmt.Errorf("kind %q counted %d", kind, c)
		}
		n += c
	}
	if n != s.count {
		return fmt.Errorf("kinds add up to %d of %d events", n, s.count)
	}
	if s.count > 0 && s.First.Compare(s.last) > 0 {
		return fmt.Errorf("first event %s after last %s", s.First, s.last)
	}
	return nil
}

// Init returns the state of a context with no events.
func (Generic) Init() State { return &GenericState{} }

// Apply folds one event into s. See Reducer.
func (r Generic) Apply(s State, ev event.Event) (State, error) {
	return r.Fold(s, []event.Event{ev})
}

// Fold folds evs into s. See Reducer.
func (r Generic) Fold(s State, evs []event.Event) (State, error) {
	newState := func() *GenericState { return &GenericState{} }
	return foldCopy(s, evs, newState, func(next *GenericState) func(event.Event) {
		own := false // whether next.kinds is this fold's own copy yet
		return func(ev event.Event) {
			next.advance(ev)
			t := Time{ev.Time()}
			if next.count == 1 {
				next.First, next.FirstAt = ev.ID, t
			}
			next.LastAt = t
			if _, seen := next.kinds[ev.Kind]; !seen && len(next.kinds) >= r.Limits.names() {
				next.OtherKinds++
				return
			}
			if !own {
				next.kinds, own = cloneOrEmpty(next.kinds), true
			}
			next.kinds[ev.Kind]++
		}
	})
}
