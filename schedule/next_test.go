package schedule

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has

	"github.com/google/go-cmp/cmp"
	"github.com/robfig/cron/v3"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func mustCompile(t *testing.T, spec Spec) *Schedule {
	t.Helper()
	s, err := Compile(spec, "test")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The daylight-saving rules on real zones: a wall clock the zone skips
// fires once at the jump, a repeated one once at its first occurrence.
func TestNextAcrossDaylightSaving(t *testing.T) {
	tests := []struct {
		name, zone, cron, after string
		want                    []string // UTC
	}{
		{"Berlin spring: 02:30 does not exist, fires at the jump to 03:00", "Europe/Berlin", "30 2 * * *", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"Berlin autumn: 02:30 twice, fires at the first", "Europe/Berlin", "30 2 * * *", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"Berlin autumn hourly: the repeated 02:00 fires once", "Europe/Berlin", "0 * * * *", "2026-10-24T23:30:00Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z", "2026-10-25T03:00:00Z"}},
		{"New York spring: half-hourly across the jump", "America/New_York", "*/30 * * * *", "2026-03-08T06:40:00Z",
			[]string{"2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z"}},
		{"New York autumn hourly: 01:00 once", "America/New_York", "0 * * * *", "2026-11-01T04:30:00Z",
			[]string{"2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z", "2026-11-01T08:00:00Z"}},
		{"New York: from inside the second 01:00 hour", "America/New_York", "*/15 * * * *", "2026-11-01T06:10:00Z",
			[]string{"2026-11-01T07:00:00Z", "2026-11-01T07:15:00Z"}},
		{"Lord Howe spring: half-hour jump over 02:15", "Australia/Lord_Howe", "15 2 * * *", "2026-10-03T00:00:00Z",
			[]string{"2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"}},
		{"Lord Howe autumn: 01:45 twice, fires at the first", "Australia/Lord_Howe", "45 1 * * *", "2026-04-04T00:00:00Z",
			[]string{"2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"}},
		{"descriptor in a zone", "Europe/Berlin", "@daily", "2026-03-28T12:00:00Z",
			[]string{"2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"}},
		{"seconds field", "UTC", "*/20 * * * * *", "2026-01-01T00:00:05Z",
			[]string{"2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustCompile(t, Spec{Cron: tt.cron, Timezone: tt.zone})
			var got []string
			for _, d := range s.Preview(utc(tt.after), time.Time{}, len(tt.want)) {
				got = append(got, d.UTC().Format(time.RFC3339))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("due times (-want +got):\n%s", diff)
			}
		})
	}
}

// robfig/cron run in the zone itself steps over a skipped wall clock and
// fires a repeated one twice; this is why Next matches wall clocks.
func TestRobfigAloneDisagrees(t *testing.T) {
	ny, _ := time.LoadLocation("America/New_York")
	c, _ := cron.ParseStandard("30 2 * * *")
	c.(*cron.SpecSchedule).Location = ny
	if got := c.Next(utc("2026-03-07T12:00:00Z")); !got.Equal(utc("2026-03-09T06:30:00Z")) {
		t.Errorf("robfig/cron after 2026-03-07: %v, want the 9th (the 8th's 02:30 stepped over)", got.UTC())
	}
	c, _ = cron.ParseStandard("30 1 * * *")
	c.(*cron.SpecSchedule).Location = ny
	first := c.Next(utc("2026-11-01T00:00:00Z"))
	if second := c.Next(first); second.Sub(first) != time.Hour {
		t.Errorf("robfig/cron after the first 01:30: %v, want the second an hour later", second.UTC())
	}
	s := mustCompile(t, Spec{Cron: "30 1 * * *", Timezone: "America/New_York"})
	if got := s.Next(first, time.Time{}); got.Sub(first) < 23*time.Hour {
		t.Fatalf("Next after the first 01:30 is %v, want the next day", got.UTC())
	}
}

func TestIntervalCountsFromAnchor(t *testing.T) {
	s := mustCompile(t, Spec{Interval: 90})
	anchor := utc("2026-01-01T00:00:00Z")
	got := s.Preview(anchor.Add(100*time.Second), anchor, 3)
	want := []time.Time{anchor.Add(180 * time.Second), anchor.Add(270 * time.Second), anchor.Add(360 * time.Second)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := s.Next(anchor.Add(-time.Hour), anchor); !got.Equal(anchor.Add(90 * time.Second)) {
		t.Errorf("before the anchor: %v", got)
	}
}

func TestCompileNamesTheBadField(t *testing.T) {
	tests := []struct {
		spec  Spec
		field string
	}{
		{Spec{Cron: "61 * * * *"}, "cron"},
		{Spec{Cron: "* * *"}, "cron"},
		{Spec{Cron: "0 0 30 2 *"}, "cron"},
		{Spec{Cron: "TZ=Europe/Berlin 0 0 * * *"}, "cron"},
		{Spec{Cron: "@every 5m"}, "cron"},
		{Spec{}, "cron"},
		{Spec{Cron: "@daily", Interval: 5}, "cron"},
		{Spec{Cron: "@daily", Timezone: "Mars/Olympus"}, "timezone"},
		{Spec{Cron: "@daily", Timezone: "Local"}, "timezone"},
		{Spec{Interval: 0.5}, "interval"},
		{Spec{Interval: -1}, "interval"},
		{Spec{Interval: 60, Overlap: "queue"}, "overlap"},
		{Spec{Interval: 60, Misfire: "later"}, "misfire"},
		{Spec{Interval: 60, CatchUpMax: -1}, "catchUpMax"},
		{Spec{Interval: 60, Jitter: -3}, "jitter"},
		{Spec{Interval: 60, CatchUpWindow: 1e12}, "catchUpWindow"},
	}
	for _, tt := range tests {
		_, err := Compile(tt.spec, "x")
		e, ok := err.(interface{ Error() string })
		if !ok || !strings.Contains(e.Error(), "map["+tt.field+":") {
			t.Errorf("Compile(%+v) = %v, want an error naming %s", tt.spec, err, tt.field)
		}
	}
	s := mustCompile(t, Spec{Cron: "0 9 * * 1-5"})
	if sp := s.Spec(); sp.Timezone != "UTC" || sp.Overlap != OverlapSkip || sp.Misfire != MisfireFireOnce || sp.CatchUpMax != DefaultCatchUpMax {
		t.Errorf("defaults: %+v", sp)
	}
}

func TestJitterIsTheSameOnEveryInstance(t *testing.T) {
	a, _ := Compile(Spec{Interval: 60, Jitter: 30}, "nightly")
	b, _ := Compile(Spec{Interval: 60, Jitter: 30}, "nightly")
	other, _ := Compile(Spec{Interval: 60, Jitter: 30}, "hourly")
	d := utc("2026-01-01T00:00:00Z")
	differ := 0
	for i := range 100 {
		due := d.Add(time.Duration(i) * time.Minute)
		pa, pb := a.Planned(due), b.Planned(due)
		if !pa.Equal(pb) {
			t.Fatalf("due %v planned %v and %v", due, pa, pb)
		}
		if pa.Before(due) || pa.After(due.Add(30*time.Second)) {
			t.Fatalf("due %v planned %v, outside the jitter", due, pa)
		}
		if !other.Planned(due).Equal(pa) {
			differ++
		}
	}
	if differ == 0 {
		t.Fatal("two schedules got the same jitter for every due time")
	}
}
