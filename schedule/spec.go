// Package schedule decides when a schedule fires: its due times from a cron
// expression or an interval in an IANA time zone, and what happens to each
// due time under the schedule's policies (misfire after downtime, overlap
// with a run still going, jitter, pause). It is pure: no store, no clock of
// its own, no HTTP. The caller passes the time and the schedule's state and
// records what Step decides; docs/schedules.md describes the rules.
package schedule

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/nqd-dev/nqd"
)

// Overlap policies: what a due time does while a run of the schedule's
// previous fire is still going.
const (
	OverlapAllow          = "allow"           // fire anyway
	OverlapSkip           = "skip"            // skip the due time (the default)
	OverlapBufferOne      = "buffer_one"      // hold one, fire it when the run ends; skip more
	OverlapCancelPrevious = "cancel_previous" // cancel the running run, then fire
)

// Misfire policies: what due times missed by more than the grace (nqd was
// down, or paused past them) do.
const (
	MisfireSkip     = "skip"      // none fire
	MisfireFireOnce = "fire_once" // the latest fires once (the default)
	MisfireCatchUp  = "catch_up"  // each within the window fires, oldest first, up to the cap
)

// Defaults of a Spec's optional fields.
const (
	DefaultTimezone      = "UTC"
	DefaultOverlap       = OverlapSkip
	DefaultMisfire       = MisfireFireOnce
	DefaultMisfireGrace  = time.Minute
	DefaultCatchUpWindow = 24 * time.Hour
	DefaultCatchUpMax    = 100
)

// Bounds of a Spec.
const (
	MinInterval   = time.Second
	MaxInterval   = 366 * 24 * time.Hour
	MaxCatchUpMax = 10_000
)

// Spec is a schedule as a client writes it: Nuxt Queue's schedule trigger
// config (`cron` or `interval` in seconds, `timezone`, `runImmediately`)
// with nqd's policies beside it. Durations are in seconds, as `interval` is.
type Spec struct {
	Cron           string  `json:"cron,omitempty"`
	Interval       float64 `json:"interval,omitempty"`
	Timezone       string  `json:"timezone,omitempty"`
	RunImmediately bool    `json:"runImmediately,omitempty"`
	Overlap        string  `json:"overlap,omitempty"`
	Misfire        string  `json:"misfire,omitempty"`
	MisfireGrace   float64 `json:"misfireGrace,omitempty"`
	CatchUpWindow  float64 `json:"catchUpWindow,omitempty"`
	CatchUpMax     int     `json:"catchUpMax,omitempty"`
	// Jitter delays each due time by up to this many seconds, the same
	// delay for a due time on every instance (see Schedule.Planned).
	Jitter float64 `json:"jitter,omitempty"`
}

// Schedule is a compiled Spec: a valid one, with its defaults applied.
type Schedule struct {
	spec     Spec
	loc      *time.Location
	cron     cron.Schedule // nil for an interval
	interval time.Duration
	grace    time.Duration
	window   time.Duration
	jitter   time.Duration
	// seed spreads the jitter of schedules that share due times.
	seed string
}

// parser reads standard five-field expressions, an optional leading
// seconds field and the @daily-style descriptors.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Compile checks spec and applies its defaults; seed (the schedule's name)
// makes its jitter its own. A bad field is an *nqd.Error of CodeValidation
// whose Fields name it.
func Compile(spec Spec, seed string) (*Schedule, error) {
	s := &Schedule{spec: spec, seed: seed}
	bad := func(field, format string, args ...any) error {
		return &nqd.Error{Code: nqd.CodeValidation, Message: "The schedule has invalid fields.",
			Fields: map[string]string{field: fmt.Sprintf(format, args...)}}
	}
	if s.spec.Timezone == "" {
		s.spec.Timezone = DefaultTimezone
	}
	loc, err := time.LoadLocation(s.spec.Timezone)
	if err != nil || s.spec.Timezone == "Local" {
		return nil, bad("timezone", "%q is not an IANA time zone such as Europe/Berlin", spec.Timezone)
	}
	s.loc = loc
	switch {
	case spec.Cron != "" && spec.Interval != 0:
		return nil, bad("cron", "give either cron or interval, not both")
	case spec.Cron != "":
		expr := strings.TrimSpace(spec.Cron)
		if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
			return nil, bad("cron", "set the time zone in the timezone field, not in the expression")
		}
		if strings.HasPrefix(expr, "@every") {
			return nil, bad("cron", "use the interval field for a fixed period")
		}
		c, err := parser.Parse(expr)
		if err != nil {
			return nil, bad("cron", "%v", err)
		}
		// Evaluated on wall clocks (see next.go), so in UTC, which has no
		// daylight saving of its own.
		c.(*cron.SpecSchedule).Location = time.UTC
		s.cron = c
		if c.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
			return nil, bad("cron", "%q never matches a date", spec.Cron)
		}
	case spec.Interval != 0:
		d, ok := seconds(spec.Interval)
		if !ok || d < MinInterval || d > MaxInterval {
			return nil, bad("interval", "must be seconds between %v and %v", MinInterval.Seconds(), MaxInterval.Seconds())
		}
		s.interval = d.Truncate(time.Millisecond)
	default:
		return nil, bad("cron", "give a cron expression or an interval")
	}
	if s.spec.Overlap == "" {
		s.spec.Overlap = DefaultOverlap
	}
	switch s.spec.Overlap {
	case OverlapAllow, OverlapSkip, OverlapBufferOne, OverlapCancelPrevious:
	default:
		return nil, bad("overlap", "must be allow, skip, buffer_one or cancel_previous")
	}
	if s.spec.Misfire == "" {
		s.spec.Misfire = DefaultMisfire
	}
	switch s.spec.Misfire {
	case MisfireSkip, MisfireFireOnce, MisfireCatchUp:
	default:
		return nil, bad("misfire", "must be skip, fire_once or catch_up")
	}
	for _, f := range []struct {
		name string
		v    float64
		def  time.Duration
		to   *time.Duration
	}{
		{"misfireGrace", spec.MisfireGrace, DefaultMisfireGrace, &s.grace},
		{"catchUpWindow", spec.CatchUpWindow, DefaultCatchUpWindow, &s.window},
		{"jitter", spec.Jitter, 0, &s.jitter},
	} {
		d, ok := seconds(f.v)
		if !ok || d > MaxInterval {
			return nil, bad(f.name, "must be seconds between 0 and %v", MaxInterval.Seconds())
		}
		if d == 0 {
			d = f.def
		}
		*f.to = d.Truncate(time.Millisecond)
	}
	if spec.CatchUpMax < 0 || spec.CatchUpMax > MaxCatchUpMax {
		return nil, bad("catchUpMax", "must be between 0 and %d", MaxCatchUpMax)
	}
	if s.spec.CatchUpMax == 0 {
		s.spec.CatchUpMax = DefaultCatchUpMax
	}
	return s, nil
}

// seconds converts a non-negative number of seconds.
func seconds(v float64) (time.Duration, bool) {
	if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) || v > MaxInterval.Seconds() {
		return 0, false
	}
	return time.Duration(v * float64(time.Second)), true
}

// Spec is the schedule as compiled, its defaults filled in.
func (s *Schedule) Spec() Spec { return s.spec }

// Location is the schedule's time zone.
func (s *Schedule) Location() *time.Location { return s.loc }

// Kind is "cron" or "interval".
func (s *Schedule) Kind() string {
	if s.cron != nil {
		return "cron"
	}
	return "interval"
}
