package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// FuzzDecodeAppend feeds arbitrary bodies to the append decoder. Whatever it
// accepts must be a valid record whose aliases agree, and must read back the
// same when sent again in the form nqd writes it; whatever it rejects must be
// a 4xx in the error shape.
func FuzzDecodeAppend(f *testing.F) {
	for _, seed := range []string{
		`{"kind":"step.started","flow":"r1","step":"a","meta":{"attempt":1}}`,
		`{"type":"log","runId":"r1","stepName":"a","stepId":"r1__a__attempt-1","attempt":2,"data":{"level":"info"}}`,
		`{"events":[{"kind":"a"},{"type":"b","subject":"run-1"}]}`,
		`{"kind":"a","attempt":2,"meta":{"attempt":1}}`,
		`{"kind":"a","meta":null,"data":null}`,
		`{"kind":"a","meta":[]}`,
		`[1,2]`, `{"events":[]}`, `{"kind":"a"} x`, ``,
		"{\"kind\":\"x.y\",\"data\":{\"s\":\"\xff\xfe\"}}", `{"kind":"a","kind":"b"}`, `{"kind":"a","data":"\ud800"}`,
	} {
		f.Add(seed)
	}
	a := New(Deps{Limits: Limits{MaxBodyBytes: 1 << 16}})
	c := store.Context{Type: "flow", ID: "run-1"}
	f.Fuzz(func(t *testing.T, body string) {
		evs, _, err := a.decodeAppend(newBodyRequest(body, a.limits.MaxBodyBytes), c)
		if err != nil {
			if e := toError(err); statusOf(e.Code) != http.StatusBadRequest && statusOf(e.Code) != http.StatusRequestEntityTooLarge {
				t.Fatalf("rejected with %d %s (%v), want 400 or 413", statusOf(e.Code), e.Code, err)
			}
			return
		}
		if len(evs) == 0 {
			t.Fatal("accepted a body with no events")
		}
		for i, ev := range evs {
			checkAccepted(t, ev, c)
			wire, err := ev.MarshalJSON()
			if err != nil {
				t.Fatalf("event %d does not encode: %v", i, err)
			}
			if err := strictValue(wire); err != nil {
				t.Fatalf("event %d reads back as %s, which a strict reader refuses: %v", i, wire, err)
			}
			again, _, err := a.decodeAppend(newBodyRequest(string(wire), a.limits.MaxBodyBytes), c)
			if err != nil {
				t.Fatalf("nqd's own record %s is rejected: %v", wire, err)
			}
			if diff := cmp.Diff(normalized(t, ev), normalized(t, again[0])); diff != "" {
				t.Fatalf("record changed when sent again (-first +again):\n%s", diff)
			}
		}
	})
}

// FuzzStrictJSON feeds arbitrary bytes to the body decoder every route
// uses: what it accepts, a strict reader (UTF-8 only, each name once per
// object) accepts too, and what it refuses is a 400 or 413.
func FuzzStrictJSON(f *testing.F) {
	for _, seed := range []string{
		`{"a":1}`, `{"a":{"b":[1,{"c":"d"}]}}`, `{"a":1,"a":2}`, `{"a":{"b":1,"b":1}}`,
		"{\"a\":\"\xff\"}", "{\"\xc3\":1}", `{"a":"\udc00"}`, `{"a":"\ud83d\ude00"}`, `[{"x":1,"x":1}]`, `"s"`, `{`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var v any
		err := decodeStrict(bytes.NewReader(body), &v, "")
		if err != nil {
			if e := toError(err); statusOf(e.Code) != http.StatusBadRequest {
				t.Fatalf("refused with %d %s (%v), want 400", statusOf(e.Code), e.Code, err)
			}
			return
		}
		if err := strictValue(bytes.TrimSpace(body)); err != nil {
			t.Fatalf("accepted %q, which a strict reader refuses: %v", body, err)
		}
	})
}

// strictValue checks b as one JSON value by RFC 7493 (jsontext's default):
// UTF-8 only, valid escapes, each name once per object.
func strictValue(b []byte) error {
	if !jsontext.Value(b).IsValid() {
		return errors.New("not I-JSON")
	}
	return nil
}

func newBodyRequest(body string, limit int64) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/api/_events/flow/run-1", strings.NewReader(body))
	r.Body = http.MaxBytesReader(httptest.NewRecorder(), r.Body, limit)
	return r
}

func checkAccepted(t *testing.T, ev event.Event, c store.Context) {
	t.Helper()
	if !event.ValidKind(ev.Kind) || ev.Subject != c.ID || ev.Attempt < 0 || !ev.ID.IsZero() {
		t.Fatalf("accepted %+v", ev)
	}
	if ev.Meta == nil {
		if ev.Attempt != 0 {
			t.Fatalf("attempt %d without meta.attempt", ev.Attempt)
		}
		return
	}
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(ev.Meta, &meta); err != nil {
		t.Fatalf("meta %s is not an object: %v", ev.Meta, err)
	}
	if ev.Attempt != 0 {
		var ma int
		if err := json.Unmarshal(meta["attempt"], &ma); err != nil || ma != ev.Attempt {
			t.Fatalf("attempt %d, meta.attempt %s", ev.Attempt, meta["attempt"])
		}
	}
}

// normalized compacts the raw JSON of ev so that formatting does not count.
func normalized(t *testing.T, ev event.Event) event.Event {
	t.Helper()
	compact := func(m json.RawMessage) json.RawMessage {
		if m == nil {
			return nil
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, m); err != nil {
			t.Fatalf("compact %s: %v", m, err)
		}
		return buf.Bytes()
	}
	ev.Data, ev.Meta = compact(ev.Data), compact(ev.Meta)
	return ev
}

// BenchmarkDecodeStrict is the decoding of a typical single-event body
// (about 280 bytes) into the append route's input record.
func BenchmarkDecodeStrict(b *testing.B) {
	body := []byte(`{"type":"step.completed","runId":"64fc8be3-8adf-459c-a837-5727abd5df94","flowName":"example-flow","stepName":"first_step","attempt":1,"data":{"result":{"ok":true,"n":42,"s":"some text to make it longer"}},"meta":{"attempt":1,"stepId":"64fc__first_step__attempt-1"}}`)
	b.ReportAllocs()
	for b.Loop() {
		var in appendBody
		if err := decodeStrict(bytes.NewReader(body), &in, ""); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzResolveMeta checks that reading meta in place (checkMeta) answers as
// the general path (mergeMeta) does, whenever it answers at all.
func FuzzResolveMeta(f *testing.F) {
	for _, seed := range []struct {
		meta    string
		attempt int
		stepID  string
	}{
		{`{"attempt":1,"stepId":"s"}`, 1, "s"}, {`{"attempt":1}`, 2, ""}, {`{"attempt":"2"}`, 0, ""},
		{`{"attempt":null}`, 3, ""}, {`{"att\u0065mpt":4}`, 0, ""}, {`{"stepId":5}`, 0, "x"},
		{`{"stepId":"y"}`, 0, "x"}, {`[1]`, 0, ""}, {`{"attempt":1.5}`, 0, ""}, {`{"attempt":-2}`, 0, ""},
		{`{}`, 0, ""}, {`{"a":{"attempt":9}}`, 1, ""}, {`{"attempt":99999999999999999999}`, 0, ""},
	} {
		f.Add([]byte(seed.meta), seed.attempt, seed.stepID)
	}
	f.Fuzz(func(t *testing.T, meta []byte, attempt int, stepID string) {
		if !jsontext.Value(meta).IsValid() {
			return // the body decoder refuses it before meta is read
		}
		fast := map[string]string{}
		a, ok := checkMeta(meta, attempt, stepID, "", fast)
		if !ok {
			return
		}
		general := map[string]string{}
		gm, ga := mergeMeta(meta, attempt, stepID, "", general)
		if a != ga || !maps.Equal(fast, general) || !bytes.Equal(gm, meta) {
			t.Fatalf("meta %s, attempt %d, stepId %q: in place (%d, %v), general (%d, %v, %s)",
				meta, attempt, stepID, a, fast, ga, general, gm)
		}
	})
}
