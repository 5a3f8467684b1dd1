package schedule

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// sim runs a schedule on the bubble's clock as a firing loop would: it
// steps at each wake, starts a run of runFor for each fire, and records
// fires (as seconds after the start) and skips.
type sim struct {
	s      *Schedule
	st     State
	t0     time.Time
	runFor time.Duration
	runEnd time.Time
	// fired holds "due@at" in seconds after t0.
	fired   [][2]int
	skipped map[string]int
	cancels int
}

func newSim(t *testing.T, spec Spec, runFor time.Duration) *sim {
	now := time.Now()
	return &sim{s: mustCompile(t, spec), st: Start(now), t0: now, runFor: runFor, skipped: map[string]int{}}
}

func (m *sim) secs(t time.Time) int { return int(t.Sub(m.t0) / time.Second) }

func (m *sim) step() Plan {
	now := time.Now()
	p := m.s.Step(m.st, now, now.Before(m.runEnd))
	m.st = p.State
	if p.Cancel {
		m.cancels++
		m.runEnd = now
	}
	for _, d := range p.Fires {
		m.fired = append(m.fired, [2]int{m.secs(d), m.secs(now)})
		m.runEnd = now.Add(m.runFor)
	}
	for _, sk := range p.Skips {
		m.skipped[sk.Reason] += sk.Count
	}
	return p
}

// until steps at every wake up to t0+end seconds.
func (m *sim) until(end int) {
	stop := m.t0.Add(time.Duration(end) * time.Second)
	for {
		p := m.step()
		next := p.Wake
		if p.WaitsForRun && m.runEnd.After(time.Now()) && (next.IsZero() || m.runEnd.Before(next)) {
			next = m.runEnd
		}
		if next.IsZero() || next.After(stop) {
			time.Sleep(time.Until(stop))
			return
		}
		time.Sleep(time.Until(next))
	}
}

// sleepTo moves the clock to t0+s seconds without stepping: nqd is down.
func (m *sim) sleepTo(s int) { time.Sleep(time.Until(m.t0.Add(time.Duration(s) * time.Second))) }

func fires(pairs ...int) [][2]int {
	var out [][2]int
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, [2]int{pairs[i], pairs[i+1]})
	}
	return out
}

func TestOverlapPolicies(t *testing.T) {
	tests := []struct {
		overlap string
		want    [][2]int
		skipped map[string]int
		cancels int
	}{
		{OverlapAllow, fires(60, 60, 120, 120, 180, 180, 240, 240, 300, 300, 360, 360, 420, 420, 480, 480, 540, 540, 600, 600), map[string]int{}, 0},
		{OverlapSkip, fires(60, 60, 240, 240, 420, 420, 600, 600), map[string]int{ReasonOverlap: 6}, 0},
		// 120 waits for the run of 60 to end at 210 and 180 finds the
		// buffer full; 240 waits for 360, when the run of 120 ends and 360
		// takes the buffer it frees; and so on.
		{OverlapBufferOne, fires(60, 60, 120, 210, 240, 360, 360, 510), map[string]int{ReasonOverlap: 5}, 0},
		{OverlapCancelPrevious, fires(60, 60, 120, 120, 180, 180, 240, 240, 300, 300, 360, 360, 420, 420, 480, 480, 540, 540, 600, 600), map[string]int{}, 9},
	}
	for _, tt := range tests {
		t.Run(tt.overlap, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newSim(t, Spec{Interval: 60, Overlap: tt.overlap}, 150*time.Second)
				m.until(600)
				if diff := cmp.Diff(tt.want, m.fired); diff != "" {
					t.Errorf("fires due@at (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tt.skipped, m.skipped); diff != "" {
					t.Errorf("skips (-want +got):\n%s", diff)
				}
				if m.cancels != tt.cancels {
					t.Errorf("cancels: got %d, want %d", m.cancels, tt.cancels)
				}
			})
		})
	}
}

// nqd is down from 90s to 400s: the due times 120..360 are missed by more
// than the 10s grace.
func TestMisfirePolicies(t *testing.T) {
	tests := []struct {
		name    string
		spec    Spec
		want    [][2]int
		skipped map[string]int
	}{
		{"skip", Spec{Misfire: MisfireSkip}, fires(60, 60, 420, 420, 480, 480), map[string]int{ReasonMisfire: 5}},
		{"fire_once", Spec{Misfire: MisfireFireOnce}, fires(60, 60, 360, 400, 420, 420, 480, 480), map[string]int{ReasonMisfire: 4}},
		{"catch_up", Spec{Misfire: MisfireCatchUp, CatchUpWindow: 200, CatchUpMax: 2}, fires(60, 60, 300, 400, 360, 400, 420, 420, 480, 480),
			map[string]int{ReasonCatchUpWindow: 2, ReasonCatchUpMax: 1}},
		{"catch_up all", Spec{Misfire: MisfireCatchUp}, fires(60, 60, 120, 400, 180, 400, 240, 400, 300, 400, 360, 400, 420, 420, 480, 480), map[string]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				spec := tt.spec
				spec.Interval, spec.MisfireGrace, spec.Overlap = 60, 10, OverlapAllow
				m := newSim(t, spec, time.Second)
				m.until(90)
				m.sleepTo(400)
				m.until(500)
				if diff := cmp.Diff(tt.want, m.fired); diff != "" {
					t.Errorf("fires due@at (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tt.skipped, m.skipped); diff != "" {
					t.Errorf("skips (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// A long downtime of a cron schedule is summed up, not walked due by due,
// and fire_once fires its newest due time.
func TestMisfireAfterLongDowntime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newSim(t, Spec{Cron: "* * * * * *", Misfire: MisfireFireOnce}, 0)
		m.sleepTo(3 * 24 * 3600)
		p := m.step()
		if len(p.Fires) == 0 {
			t.Fatal("nothing fired")
		}
		if len(p.Skips) == 0 || !p.Skips[0].From.Equal(m.t0.Add(time.Second)) || p.Skips[0].Reason != ReasonMisfire {
			t.Errorf("skips %+v, want misfires from the first due time", p.Skips)
		}
		if last := p.Fires[len(p.Fires)-1]; time.Since(last) > time.Minute {
			t.Errorf("fired %v ago, want a due time within the grace", time.Since(last))
		}
		if p.State.Cursor != time.Now().UnixMilli() {
			t.Errorf("cursor %d, want now", p.State.Cursor)
		}
		if !p.Wake.Equal(time.Now().Add(time.Second)) {
			t.Errorf("wake %v", p.Wake)
		}
	})
}

func TestPauseAndResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newSim(t, Spec{Interval: 60, MisfireGrace: 10}, time.Second)
		m.until(90)
		m.st = Pause(m.st)
		if p := m.step(); !p.Wake.IsZero() || len(p.Fires) != 0 {
			t.Fatalf("paused schedule plans %+v", p)
		}
		m.sleepTo(400)
		m.st = Resume(m.st, time.Now())
		m.until(500)
		if diff := cmp.Diff(fires(60, 60, 420, 420, 480, 480), m.fired); diff != "" {
			t.Errorf("fires (-want +got):\n%s", diff)
		}
		if len(m.skipped) != 0 {
			t.Errorf("due times while paused recorded as skipped: %v", m.skipped)
		}
	})
}

func TestJitterDelaysFires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newSim(t, Spec{Interval: 60, Jitter: 20}, time.Second)
		m.until(700)
		if len(m.fired) < 10 {
			t.Fatalf("fired %v", m.fired)
		}
		for _, f := range m.fired {
			due := m.t0.Add(time.Duration(f[0]) * time.Second)
			if at := m.s.Planned(due); m.secs(at) != f[1] {
				t.Errorf("due %d fired at %d, planned %v", f[0], f[1], m.secs(at))
			}
		}
	})
}
