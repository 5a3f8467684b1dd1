package outage_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/internal/outage"
)

type line struct {
	Level    string `json:"level"`
	Message  string `json:"message"`
	Error    string `json:"error"`
	Failures int    `json:"failures"`
	DownFor  string `json:"down_for"`
}

func lines(t *testing.T, buf *bytes.Buffer) []line {
	t.Helper()
	var out []line
	for s := range strings.Lines(buf.String()) {
		var l line
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("not a JSON line: %q", s)
		}
		out = append(out, l)
	}
	buf.Reset()
	return out
}

// TestOutage: a failure every 250 ms for 70 s gives one line at the start,
// one reminder per 30 s with the failures it stands for, and one line when
// the work is back; a second outage starts over.
func TestOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		o := outage.New(zerolog.New(&buf), "engine tick")
		o.Succeeded()
		if got := lines(t, &buf); len(got) != 0 {
			t.Fatalf("a success with no outage logged %v", got)
		}
		down := errors.New("dial tcp: connection refused")
		for range 280 { // 70 s
			o.Failed(down)
			time.Sleep(250 * time.Millisecond)
		}
		got := lines(t, &buf)
		if len(got) != 3 {
			t.Fatalf("70 s of failures: %d lines, want 3 (start, two reminders): %+v", len(got), got)
		}
		if got[0].Level != "error" || got[0].Error != down.Error() || !strings.HasPrefix(got[0].Message, "engine tick failed") {
			t.Errorf("first line %+v, want the error", got[0])
		}
		for _, r := range got[1:] {
			if r.Message != "engine tick still failing" || r.Failures != 120 || r.Error != down.Error() {
				t.Errorf("reminder %+v, want 120 failures counted", r)
			}
		}
		if got[2].DownFor != "1m0s" {
			t.Errorf("second reminder down_for %q, want 1m0s", got[2].DownFor)
		}
		o.Succeeded()
		o.Succeeded()
		got = lines(t, &buf)
		if len(got) != 1 || got[0].Level != "info" || got[0].Failures != 280 || got[0].DownFor != "1m10s" {
			t.Fatalf("back: %+v, want one info line with 280 failures over 1m10s", got)
		}
		o.Failed(down)
		if got := lines(t, &buf); len(got) != 1 || !strings.HasPrefix(got[0].Message, "engine tick failed") {
			t.Fatalf("a new outage: %+v, want its first line at once", got)
		}
	})
}
