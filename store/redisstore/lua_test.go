package redisstore_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/redisstore"
)

// TestLuaTimeFormatMatchesGo runs the scripts' own iso_ms (lib.lua) over dates from
// 1970 to 9999, leap days and century years included, and compares each with
// Go's formatting of the same millisecond.
func TestLuaTimeFormatMatchesGo(t *testing.T) {
	src, err := os.ReadFile("scripts/lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	script := string(src) + "\nlocal out = {}\nfor i, a in ipairs(ARGV) do out[i] = iso_ms(tonumber(a)) end\nreturn out\n"

	ms := []int64{0, 999, 1000, 86_399_999, 86_400_000}
	for _, d := range []time.Time{
		time.Date(2000, 2, 29, 23, 59, 59, 999e6, time.UTC),
		time.Date(2000, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 2, 29, 12, 0, 0, 1e6, time.UTC),
		time.Date(2100, 2, 28, 23, 59, 59, 999e6, time.UTC),
		time.Date(2100, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1999, 12, 31, 23, 59, 59, 999e6, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC),
	} {
		ms = append(ms, d.UnixMilli())
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		ms = append(ms, rng.Int64N(253_402_300_800_000))
	}
	args := make([]any, len(ms))
	for i, m := range ms {
		args[i] = strconv.FormatInt(m, 10)
	}
	got, err := redistest.Client(t).Eval(t.Context(), script, nil, args...).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		if want := time.UnixMilli(m).UTC().Format(event.TimeFormat); got[i] != want {
			t.Errorf("iso_ms(%d) = %q, want %q", m, got[i], want)
		}
	}
}

// richEvents use every field, HTML-escaped characters and non-ASCII text, so
// any difference between the script's record and Go's encoding shows.
func richEvents(c store.Context) []event.Event {
	return []event.Event{
		{
			Kind: "flow.started", Subject: c.ID, RunID: c.ID, FlowName: "billing",
			CorrelationID: "corr-1", Data: json.RawMessage(`{"input": {"q": "<a & b>", "é": [1, 2.5, null]}}`),
		},
		{
			Kind: "step.failed", Subject: c.ID, RunID: c.ID, Step: "charge", Attempt: 3, Trigger: "t-1",
			Data: json.RawMessage(`"plain"`), Meta: json.RawMessage(`{"attempt":3,"backoff":"exp"}`),
		},
		{Kind: "log", Subject: c.ID},
	}
}

// TestPublishedRecordIsMarshalJSON reads the live channel with a plain Redis
// client, as another nqd instance or tool would, and checks each message is
// byte for byte the record Go writes for the stored event.
func TestPublishedRecordIsMarshalJSON(t *testing.T) {
	prefix := redistest.Prefix(t)
	s, client := newTestStore(t, redisstore.Options{Prefix: prefix})
	now := store.Context{Type: "flow", ID: "run-now"}
	// An entry id far in the future makes Redis assign the next ids after
	// it, so the script formats a date other than today's: a leap day of 2400.
	later := store.Context{Type: "flow", ID: "run-2400"}
	future := time.Date(2400, 2, 29, 23, 59, 59, 999e6, time.UTC).UnixMilli()
	seed := event.Event{Kind: "log", Subject: later.ID}
	body, _ := seed.MarshalBody()
	if err := client.XAdd(t.Context(), &redis.XAddArgs{
		Stream: s.KeyPrefixOf("run-2400") + ":flow:run-2400", ID: strconv.FormatInt(future, 10) + "-0", Values: []any{"e", body},
	}).Err(); err != nil {
		t.Fatal(err)
	}

	for _, c := range []store.Context{now, later} {
		ps := client.Subscribe(t.Context(), s.KeyPrefixOf(c.ID)+":flow:"+c.ID+":live")
		t.Cleanup(func() { _ = ps.Close() })
		if _, err := ps.Receive(t.Context()); err != nil { // the SUBSCRIBE confirmation
			t.Fatal(err)
		}
		res, err := s.Append(t.Context(), c, richEvents(c), store.AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stored, err := s.Range(t.Context(), c, store.RangeQuery{Reverse: true, Limit: len(res.Events)})
		if err != nil {
			t.Fatal(err)
		}
		if len(stored) != len(res.Events) || stored[0].ID != res.Events[len(res.Events)-1].ID {
			t.Fatalf("%s: Range gave %v, want the %d appended events", c, stored, len(res.Events))
		}
		slices.Reverse(stored)
		if c == later && stored[0].ID.MS != uint64(future) {
			t.Fatalf("appended after the 2400 entry at %v, want ms %d", stored[0].ID, future)
		}
		// Each record is published with the id of the entry before it,
		// which a fresh stream's first has none of.
		prev := ""
		if c == later {
			prev = strconv.FormatInt(future, 10) + "-0"
		}
		for i, e := range stored {
			want, err := e.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if prev != "" {
				id := `{"id":"` + e.ID.String() + `",`
				want = []byte(id + `"prev":"` + prev + `",` + strings.TrimPrefix(string(want), id))
			}
			prev = e.ID.String()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			msg, err := ps.ReceiveMessage(ctx)
			cancel()
			if err != nil {
				t.Fatalf("%s: event %d: %v", c, i, err)
			}
			if d := cmp.Diff(string(want), msg.Payload); d != "" {
				t.Errorf("%s: published record %d (-MarshalJSON +published):\n%s", c, i, d)
			}
		}
	}
}
