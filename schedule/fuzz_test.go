package schedule

import (
	"testing"
	"time"
)

// FuzzCompile feeds untrusted specs to Compile: it never panics, and a
// compiled schedule's due times come strictly after the time asked about,
// in order.
func FuzzCompile(f *testing.F) {
	for _, seed := range []struct {
		cron, tz string
		interval float64
	}{
		{"0 2 * * *", "Europe/Berlin", 0}, {"*/15 * * * *", "America/New_York", 0}, {"@daily", "Australia/Lord_Howe", 0},
		{"*/20 * * * * *", "UTC", 0}, {"", "UTC", 90}, {"61 * * * *", "UTC", 0}, {"0 0 30 2 *", "UTC", 0}, {"", "Mars/Olympus", 5},
	} {
		f.Add(seed.cron, seed.tz, seed.interval, int64(1_795_000_000_000))
	}
	f.Fuzz(func(t *testing.T, cron, tz string, interval float64, at int64) {
		s, err := Compile(Spec{Cron: cron, Timezone: tz, Interval: interval}, "fuzz")
		if err != nil {
			return
		}
		from := time.UnixMilli(at % 4_000_000_000_000)
		prev := from
		for _, d := range s.Preview(from, from, 5) {
			if !d.After(prev) {
				t.Fatalf("%q in %s: due %v after %v", cron, tz, d, prev)
			}
			prev = d
		}
	})
}
