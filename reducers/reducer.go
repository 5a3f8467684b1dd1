// Package reducers turns a context's events into its state: one pure reducer
// per context type (flow, trigger, the worker registry, and a generic one for
// the rest), shaped like raft's Step, so that folding the same events always
// gives the same state.
//
// Reducers do no IO and read no clock, logger or randomness: an event's time is
// its stream id's (event.Event.Time).
//
// States are immutable values. Apply never changes the state it is given; it
// returns a new one that shares whatever did not change with the old one, so a
// cached state can be read, marshalled or extended by any number of goroutines
// at once. Callers must treat every State as read-only.
//
// Unknown kinds are not errors: any kind may enter a stream (see "Event kinds
// the reducers read" in docs/compatibility.md), so a reducer counts such an
// event, advances its position and changes nothing else. The same holds for a
// known kind whose payload it cannot use. Apply fails only when the event
// cannot belong after the state (ErrOutOfOrder) or the state is another
// reducer's (ErrStateType); the state is then returned unchanged.
package reducers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/jsonscan"
)

// Errors returned by Apply and Fold.
var (
	// ErrOutOfOrder: the event's id is not after the state's last event id,
	// e.g. a live event the state already holds.
	ErrOutOfOrder = errors.New("event is not after the state's last event")
	// ErrStateType: the state was made by a reducer of another context type.
	ErrStateType = errors.New("state belongs to another reducer")
)

// State is a context's reduced state. It marshals to the `state` the API
// returns. Implementations are immutable.
type State interface {
	// Position is the id of the last event folded in; zero for an initial state.
	Position() event.ID
	// Count is the number of events folded in, ignored ones included.
	Count() int
	// Validate reports the first broken invariant, or nil.
	Validate() error
}

// Reducer folds events of one context type into its State.
type Reducer interface {
	// Init is the state of a context with no events.
	Init() State
	// Apply returns s with ev folded in; s itself is left unchanged. A nil s
	// means Init(). On error it returns s unchanged.
	Apply(s State, ev event.Event) (State, error)
	// Fold applies evs in order to s, as repeated Apply would, but without
	// copying the state once per event. On error it returns the state after the
	// last good event and an error naming the bad one.
	Fold(s State, evs []event.Event) (State, error)
}

// For returns the reducer for a context type, with DefaultLimits.
func For(contextType string) Reducer {
	switch contextType {
	case "flow":
		return Flow{}
	case "trigger":
		return Trigger{}
	case "registry":
		return Workers{}
	}
	return Generic{}
}

// Fold folds evs into r's initial state.
func Fold(r Reducer, evs []event.Event) (State, error) {
	return r.Fold(r.Init(), evs)
}

// Limits bound what a state keeps, since states live in a cache. A zero field
// means its default.
type Limits struct {
	Logs  int // newest log entries a flow state keeps
	Emits int // newest emitted events a flow state keeps, with their payloads
	Names int // distinct names counted per map (kinds seen, emitted event names)
}

// DefaultLimits are the limits a zero Limits stands for.
var DefaultLimits = Limits{Logs: 500, Emits: 200, Names: 256}

func (l Limits) logs() int  { return orDefault(l.Logs, DefaultLimits.Logs) }
func (l Limits) emits() int { return orDefault(l.Emits, DefaultLimits.Emits) }
func (l Limits) names() int { return orDefault(l.Names, DefaultLimits.Names) }

func orDefault(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

// Time is an event time in a state. It marshals like a record's `ts`.
type Time struct{ time.Time }

// MarshalJSON writes the time as event.TimeFormat, or null when zero.
func (t Time) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	b := make([]byte, 0, len(event.TimeFormat)+2)
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, event.TimeFormat)
	return append(b, '"'), nil
}

// millisSince is the duration from a to b in ms, never negative.
func millisSince(a, b Time) int64 {
	if a.IsZero() || b.IsZero() || b.Before(a.Time) {
		return 0
	}
	return b.Sub(a.Time).Milliseconds()
}

// formatID is event.ID.String without fmt, since it runs once per log entry.
func formatID(id event.ID) string {
	var buf [41]byte
	b := strconv.AppendUint(buf[:0], id.MS, 10)
	b = append(b, '-')
	return string(strconv.AppendUint(b, id.Seq, 10))
}

// position is what every state records about where it stands in its stream.
type position struct {
	last  event.ID
	count int
}

func (p position) Position() event.ID { return p.last }
func (p position) Count() int         { return p.count }

func (p position) check(ev event.Event) error {
	if ev.ID.Compare(p.last) <= 0 {
		return fmt.Errorf("%w: %s after %s", ErrOutOfOrder, ev.ID, p.last)
	}
	return nil
}

func (p *position) advance(ev event.Event) {
	p.last = ev.ID
	p.count++
}

func (p position) validate(ignored int) error {
	switch {
	case p.count < 0 || ignored < 0 || ignored > p.count:
		return fmt.Errorf("counts: %d events, %d ignored", p.count, ignored)
	case (p.count == 0) != p.last.IsZero():
		return fmt.Errorf("position %s after %d events", p.last, p.count)
	}
	return nil
}

// flexInt reads a number or a numeric string, as the Node module writes both.
type flexInt int64

func (n *flexInt) UnmarshalJSON(b []byte) error {
	s := string(bytes.Trim(b, `"`))
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		*n = flexInt(f)
	}
	return nil
}

// flexBool reads true, "true" or a non-zero number as true.
type flexBool bool

func (v *flexBool) UnmarshalJSON(b []byte) error {
	s := string(bytes.Trim(b, `"`))
	f, err := strconv.ParseFloat(s, 64)
	*v = flexBool(s == "true" || (err == nil && f != 0))
	return nil
}

// flexText reads a string as itself and any other value as its JSON text, so an
// error written as an object or a number still reads as a message.
type flexText string

func (t *flexText) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		if s, ok := jsonscan.String(b); ok {
			*t = flexText(s)
		}
		return nil
	}
	if len(b) > 0 && b[0] == '{' {
		var m struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(b, &m) == nil && m.Message != "" {
			*t = flexText(m.Message)
			return nil
		}
	}
	if !bytes.Equal(b, []byte("null")) {
		*t = flexText(b)
	}
	return nil
}

// rawValue keeps a JSON value compacted, so equal values compare equal
// byte for byte in Diff. It is a copy: payloads are usually compact
// already, and copying one is much cheaper than compacting it.
func rawValue(b json.RawMessage) json.RawMessage {
	if len(b) == 0 || bytes.Equal(b, []byte("null")) {
		return nil
	}
	if !bytes.ContainsAny(b, " \t\n\r") && jsonscan.Valid(b) {
		return bytes.Clone(b)
	}
	// Compacting never lengthens a value: sized to it, the buffer never grows.
	buf := bytes.NewBuffer(make([]byte, 0, len(b)))
	if json.Compact(buf, b) != nil {
		return nil
	}
	return buf.Bytes()
}

// firstText returns the first non-empty string.
func firstText(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// firstInt returns the first positive number.
func firstInt(ns ...int64) int64 {
	for _, n := range ns {
		if n > 0 {
			return n
		}
	}
	return 0
}

// foldCopy is the shape every reducer's Fold shares: s must be nil (a fresh
// state from init) or a P; every event must follow the one before it (see
// check); and the events go into a copy of the state, never into s, so a
// state once returned never changes. start makes the function that applies
// one event to the copy, holding whatever the fold needs to know about which
// parts of the copy are its own.
func foldCopy[S any, P interface {
	*S
	State
	check(event.Event) error
}](s State, evs []event.Event, init func() P, start func(next P) func(event.Event)) (State, error) {
	prev, ok := s.(P)
	switch {
	case s == nil || (ok && prev == nil):
		prev = init()
	case !ok:
		return s, ErrStateType
	}
	if len(evs) == 0 {
		return prev, nil
	}
	if err := prev.check(evs[0]); err != nil {
		return prev, err
	}
	next := P(new(S))
	*next = *prev
	apply := start(next)
	for i, ev := range evs {
		if i > 0 {
			if err := next.check(ev); err != nil {
				return next, fmt.Errorf("event %d: %w", i, err)
			}
		}
		apply(ev)
	}
	return next, nil
}
