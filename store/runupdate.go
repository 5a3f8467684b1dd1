package store

import (
	"fmt"

	"github.com/nqd-dev/nqd/event"
)

// Name is the timer's key among all timers. Only the step may hold a colon,
// so the name parses back (see Valid).
func (t Timer) Name() string { return t.Kind + ":" + t.FlowName + ":" + t.RunID + ":" + t.Step }

// Valid reports whether t's names pass the name rules, so its Name parses
// back into the same timer.
func (t Timer) Valid() bool {
	return event.ValidName(t.Kind) && event.ValidName(t.FlowName) && event.ValidContextID(t.RunID) && t.Step != ""
}

// EventStream is the context u's events are appended to: u.Stream, or
// the run's stream flow:<RunID>.
func (u RunUpdate) EventStream() Context {
	if u.Stream != (Context{}) {
		return u.Stream
	}
	return Context{Type: "flow", ID: u.Meta.RunID}
}

// CheckRunUpdate checks a run update before anything is written, by the
// rules every backend shares: every name that reaches a key passes the name
// rules. Errors wrap ErrInvalid.
func CheckRunUpdate(u RunUpdate) error {
	m := u.Meta
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: update of run %q of flow %q: %s", ErrInvalid, m.RunID, m.FlowName, fmt.Sprintf(format, args...))
	}
	if !event.ValidName(m.FlowName) || !event.ValidContextID(m.RunID) {
		return bad("run or flow name")
	}
	if u.Stream != (Context{}) && !u.Stream.Valid() {
		return bad("stream %q", u.Stream)
	}
	if !event.ValidName(m.Status) || (u.PrevStatus != "" && !event.ValidName(u.PrevStatus)) {
		return bad("status %q after %q", m.Status, u.PrevStatus)
	}
	for _, j := range u.Enqueue {
		if !event.ValidName(j.Queue) || j.ID == "" {
			return bad("job %q in queue %q", j.ID, j.Queue)
		}
	}
	for _, r := range u.Remove {
		if !event.ValidName(r.Queue) {
			return bad("queue %q", r.Queue)
		}
	}
	if len(u.IdempotencyKey) > MaxIdempotencyKey || (u.IdempotencyKey != "" && len(u.Events) == 0) {
		return bad("idempotency key of %d bytes for %d events", len(u.IdempotencyKey), len(u.Events))
	}
	if u.Ack != nil && u.Held != nil {
		return bad("both an ack and a held job")
	}
	for _, a := range []*JobAck{u.Ack, u.Held} {
		if a != nil && !event.ValidName(a.Queue) {
			return bad("queue %q", a.Queue)
		}
	}
	if c := u.Claim; c != nil {
		if c.Max <= 0 || c.Lease == "" {
			return bad("claim of %d jobs under lease %q", c.Max, c.Lease)
		}
		for _, q := range c.Queues {
			if !event.ValidName(q) {
				return bad("queue %q", q)
			}
		}
	}
	for _, ts := range [][]Timer{u.SetTimers, u.ClearTimers} {
		for _, t := range ts {
			if !t.Valid() {
				return bad("timer %+v", t)
			}
		}
	}
	return nil
}
