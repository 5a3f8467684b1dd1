package schedule

import (
	"hash/fnv"
	"strconv"
	"time"
)

// A cron expression is matched against wall clocks, not instants: the
// instant is turned into its wall clock in the schedule's zone, the next
// matching wall clock is found (by robfig/cron, in UTC, which has no
// daylight saving), and that wall clock is turned back into an instant.
// robfig/cron run in the zone itself steps through instants, so it never
// fires a wall clock the zone skips that day and fires a repeated one
// twice; matching wall clocks gives the two rules nqd documents instead:
//
//   - a wall clock that does not exist that day (the clocks jump over it)
//     fires once, at the instant of the jump; several in one jump fire once
//     together;
//   - a wall clock that occurs twice (the clocks go back) fires once, at
//     its first occurrence.

// maxSteps bounds the wall clocks looked at for one due time: a seconds
// schedule passes 3,600 of them in a repeated hour.
const maxSteps = 10_000

// Next is the first due time strictly after t, or the zero time if there is
// none within five years. anchor is where an interval counts from: its due
// times are anchor plus whole intervals.
func (s *Schedule) Next(t, anchor time.Time) time.Time {
	if s.cron == nil {
		k := int64(1)
		if t.After(anchor) {
			k = int64(t.Sub(anchor)/s.interval) + 1
		}
		return anchor.Add(time.Duration(k) * s.interval)
	}
	w := wall(t, s.loc)
	for range maxSteps {
		w = s.cron.Next(w)
		if w.IsZero() {
			return time.Time{}
		}
		if at := instant(w, s.loc); at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// Preview lists the next n due times after t.
func (s *Schedule) Preview(t, anchor time.Time, n int) []time.Time {
	out := make([]time.Time, 0, n)
	for range n {
		t = s.Next(t, anchor)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

// prev is the last due time strictly before t and after floor, or the
// zero time. It looks back in doubling steps, so a sparse schedule costs a
// few dozen Next calls however far back its due time is.
func (s *Schedule) prev(t, floor, anchor time.Time) time.Time {
	for back := time.Second; ; back *= 2 {
		from := t.Add(-back)
		if !from.After(floor) {
			from = floor
		}
		d := s.Next(from, anchor)
		if !d.IsZero() && d.Before(t) {
			for range maxSteps {
				n := s.Next(d, anchor)
				if n.IsZero() || !n.Before(t) {
					return d
				}
				d = n
			}
			return d
		}
		if from.Equal(floor) {
			return time.Time{}
		}
	}
}

// Planned is when due time d fires: d delayed by the schedule's jitter, a
// fraction of it that depends only on the schedule's seed and d, so every
// instance plans the same time.
func (s *Schedule) Planned(d time.Time) time.Time {
	if s.jitter <= 0 {
		return d
	}
	h := fnv.New64a()
	h.Write([]byte(s.seed))
	h.Write([]byte(strconv.FormatInt(d.UnixMilli(), 10)))
	return d.Add(time.Duration(h.Sum64()%uint64(s.jitter.Milliseconds()+1)) * time.Millisecond)
}

// wall is t's wall clock in loc, as a UTC time with the same fields.
func wall(t time.Time, loc *time.Location) time.Time {
	t = t.In(loc)
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// instant is the first instant whose wall clock in loc is w, or, when the
// clocks jump over w, the instant of the jump.
func instant(w time.Time, loc *time.Location) time.Time {
	guess := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
	// The offsets in force a day either side cover any transition near w.
	_, before := guess.Add(-24 * time.Hour).Zone()
	_, after := guess.Add(24 * time.Hour).Zone()
	var first time.Time
	for _, off := range []int{before, after} {
		at := w.Add(-time.Duration(off) * time.Second).In(loc)
		if wall(at, loc).Equal(w) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	if !first.IsZero() {
		return first
	}
	// w is in a gap: the jump is the first instant whose wall clock is
	// past w, between w read with the later offset and with the earlier.
	lo := w.Add(-time.Duration(max(before, after)) * time.Second)
	hi := w.Add(-time.Duration(min(before, after)) * time.Second)
	for hi.Sub(lo) > time.Millisecond {
		mid := lo.Add(hi.Sub(lo) / 2)
		if wall(mid, loc).After(w) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi.Truncate(time.Second).In(loc)
}
