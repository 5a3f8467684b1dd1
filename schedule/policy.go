package schedule

import (
	"time"
)

// State is what a schedule carries from one step to the next; the caller
// stores it with the schedule. Times are epoch milliseconds.
type State struct {
	// Anchor is where an interval counts from: when the schedule was made
	// or its spec last changed.
	Anchor int64 `json:"anchor"`
	// Cursor is the last due time decided: every due time at or before it
	// fired or was skipped.
	Cursor int64 `json:"cursor"`
	Paused bool  `json:"paused,omitempty"`
	// Buffered is a due time buffer_one holds until the running run ends.
	Buffered int64 `json:"buffered,omitempty"`
}

// Skip reasons.
const (
	ReasonMisfire       = "misfire"         // missed by more than the grace (misfire policy skip or fire_once)
	ReasonCatchUpWindow = "catch_up_window" // missed by more than the catch-up window
	ReasonCatchUpMax    = "catch_up_max"    // beyond the catch-up cap
	ReasonOverlap       = "overlap"         // a run of an earlier fire was still going
)

// Skip is a run of consecutive due times not fired, for one reason.
type Skip struct {
	Reason        string
	From, Through time.Time
	// Count is how many due times From..Through holds; when Counted is
	// false there were more than could be counted and Count is a floor.
	Count   int
	Counted bool
}

// Plan is what Step decided.
type Plan struct {
	// State is the schedule's state after the step; the caller stores it
	// in the same write as the fires and skips.
	State State
	// Fires are the due times to fire now, oldest first.
	Fires []time.Time
	// Cancel asks that the runs of the previous fire be canceled before
	// the first of Fires (cancel_previous).
	Cancel bool
	Skips  []Skip
	// Wake is when to step again: the next due time as planned (jitter
	// included), now when a step left due times undecided, or zero when
	// nothing is due (paused, or a cron that never matches again).
	Wake time.Time
	// WaitsForRun: a buffered due time fires once the running run ends;
	// the caller steps again when it does (or polls).
	WaitsForRun bool
}

// maxDecide bounds the due times one step decides one by one; the rest of
// a long downtime is summed up or left to the next step.
const maxDecide = 10_000

// Step decides the due times planned at or before now that st has not
// decided yet. running says whether a run of the schedule's previous fire
// is still going. The rules are in docs/schedules.md.
func (s *Schedule) Step(st State, now time.Time, running bool) Plan {
	p := Plan{State: st}
	if st.Paused {
		return p
	}
	anchor := time.UnixMilli(st.Anchor)
	cursor := time.UnixMilli(st.Cursor)
	if st.Buffered != 0 && !running {
		p.Fires = append(p.Fires, time.UnixMilli(st.Buffered))
		p.State.Buffered = 0
		running = true
	}
	// Due times planned before lo are misfires whatever the policy; they
	// are summed up without being decided one by one, except the newest
	// of them under fire_once.
	horizon := s.grace
	if s.spec.Misfire == MisfireCatchUp {
		horizon = max(s.window, s.grace)
	}
	lo := now.Add(-horizon - s.jitter)
	var misfired []time.Time
	if first := s.Next(cursor, anchor); !first.IsZero() && first.Before(lo) {
		last := s.prev(lo, cursor, anchor)
		sk := s.count(first, last, anchor)
		sk.Reason = ReasonMisfire
		if s.spec.Misfire == MisfireCatchUp {
			sk.Reason = ReasonCatchUpWindow
		}
		if s.spec.Misfire == MisfireFireOnce {
			misfired = append(misfired, last)
			if sk.Count--; sk.Count > 0 {
				sk.Through = s.prev(last, cursor, anchor)
				p.Skips = append(p.Skips, sk)
			}
		} else {
			p.Skips = append(p.Skips, sk)
		}
		cursor = last
	}
	var onTime []time.Time
	d := s.Next(cursor, anchor)
	for ; !d.IsZero() && !s.Planned(d).After(now); d = s.Next(d, anchor) {
		if len(misfired)+len(onTime) >= maxDecide {
			p.Wake = now
			break
		}
		if now.Sub(s.Planned(d)) > s.grace {
			misfired = append(misfired, d)
		} else {
			onTime = append(onTime, d)
		}
		cursor = d
	}
	p.State.Cursor = cursor.UnixMilli()
	if p.Wake.IsZero() && !d.IsZero() {
		p.Wake = s.Planned(d)
	}
	var fire []time.Time
	switch s.spec.Misfire {
	case MisfireSkip:
		p.skip(ReasonMisfire, misfired...)
	case MisfireFireOnce:
		if n := len(misfired); n > 0 && len(onTime) == 0 && p.Wake != now {
			p.skip(ReasonMisfire, misfired[:n-1]...)
			fire = append(fire, misfired[n-1])
		} else {
			p.skip(ReasonMisfire, misfired...)
		}
	case MisfireCatchUp:
		var within []time.Time
		for _, d := range misfired {
			if now.Sub(s.Planned(d)) > s.window {
				p.skip(ReasonCatchUpWindow, d)
			} else {
				within = append(within, d)
			}
		}
		if over := len(within) - s.spec.CatchUpMax; over > 0 {
			p.skip(ReasonCatchUpMax, within[:over]...)
			within = within[over:]
		}
		fire = within
	}
	fire = append(fire, onTime...)
	s.overlap(&p, fire, running)
	if p.State.Buffered != 0 {
		p.WaitsForRun = true
	}
	return p
}

// overlap applies the overlap policy to the due times about to fire.
func (s *Schedule) overlap(p *Plan, fire []time.Time, running bool) {
	if s.spec.Overlap == OverlapCancelPrevious && len(fire) > 0 {
		// Each fire would cancel the one before it, so only the newest
		// is worth starting.
		p.skip(ReasonOverlap, fire[:len(fire)-1]...)
		p.Cancel = running
		p.Fires = append(p.Fires, fire[len(fire)-1])
		return
	}
	for _, d := range fire {
		switch {
		case !running || s.spec.Overlap == OverlapAllow:
			p.Fires = append(p.Fires, d)
			running = true
		case s.spec.Overlap == OverlapBufferOne && p.State.Buffered == 0:
			p.State.Buffered = d.UnixMilli()
		default:
			p.skip(ReasonOverlap, d)
		}
	}
}

// skip records ds as skipped for reason, joining a run of the same reason.
func (p *Plan) skip(reason string, ds ...time.Time) {
	for _, d := range ds {
		if n := len(p.Skips); n > 0 && p.Skips[n-1].Reason == reason && p.Skips[n-1].Counted {
			p.Skips[n-1].Through = d
			p.Skips[n-1].Count++
			continue
		}
		p.Skips = append(p.Skips, Skip{Reason: reason, From: d, Through: d, Count: 1, Counted: true})
	}
}

// count sums up the due times from first through last.
func (s *Schedule) count(first, last, anchor time.Time) Skip {
	sk := Skip{From: first, Through: last}
	if s.cron == nil {
		sk.Count, sk.Counted = int(last.Sub(first)/s.interval)+1, true
		return sk
	}
	for d := first; !d.IsZero() && !d.After(last); d = s.Next(d, anchor) {
		if sk.Count++; sk.Count >= maxDecide {
			return sk
		}
	}
	sk.Counted = true
	return sk
}

// Wake is when st next needs a Step: its next due time as planned, or the
// zero time when it is paused or has no due time left.
func (s *Schedule) Wake(st State) time.Time {
	if st.Paused {
		return time.Time{}
	}
	d := s.Next(time.UnixMilli(st.Cursor), time.UnixMilli(st.Anchor))
	if d.IsZero() {
		return d
	}
	return s.Planned(d)
}

// Pause stops st from firing; due times while paused are skipped without
// record, as the schedule was told.
func Pause(st State) State {
	st.Paused = true
	return st
}

// Resume lets st fire again from now on: due times passed while it was
// paused are not misfires.
func Resume(st State, now time.Time) State {
	st.Paused = false
	st.Cursor = max(st.Cursor, now.UnixMilli())
	return st
}

// Start is the state of a schedule made (or changed) at now.
func Start(now time.Time) State {
	return State{Anchor: now.UnixMilli(), Cursor: now.UnixMilli()}
}
