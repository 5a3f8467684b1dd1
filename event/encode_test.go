package event

import (
	"bytes"
	"encoding/json"
	"testing"
)

// toWire is the record as encoding/json would write it through wire: what
// appendWire must write byte for byte.
func (e Event) toWire(withPosition bool) wire {
	w := wire{
		Kind: e.Kind, Type: e.Kind, Subject: e.Subject,
		Flow: e.RunID, RunID: e.RunID, FlowName: e.FlowName,
		Step: e.Step, StepName: e.Step, Attempt: e.Attempt,
		Trigger: e.Trigger, CorrelationID: e.CorrelationID,
		Data: e.Data, Meta: e.Meta,
	}
	if withPosition {
		w.ID = e.ID.String()
		w.TS = e.Time().Format(TimeFormat)
	}
	return w
}

// FuzzMarshal checks MarshalJSON and MarshalBody against encoding/json's
// encoding of the same record: the same bytes, or both an error.
func FuzzMarshal(f *testing.F) {
	f.Add(uint64(1764106747116), uint64(3), "step.completed", "run-1", "run-1", "billing", "charge", 2, "", "c-1",
		[]byte(`{"result":{"width":320,"key":"thumbs/a.jpg"}}`), []byte(`{"attempt":2}`))
	f.Add(uint64(0), uint64(0), "log", "s", "", "", "", 0, "t<1>&", "é\u2028\"x\"",
		[]byte(" { \"a\" : [1, 2.5e3, null, true] , \"b\": \"<tag> & \u2028\" } "), []byte(nil))
	f.Add(uint64(253402300799999), uint64(1<<63), "a.b", "\x00\x1f\x7f", "\xff", "\u2029", "\t", -3, "", "",
		[]byte(`"plain"`), []byte(`{"a":"\u00e9","b":"x\\"}`))
	f.Add(uint64(5), uint64(0), "k", "s", "", "", "", 0, "", "", []byte(`{"a":`), []byte(`[1,]`))
	f.Add(uint64(5), uint64(0), "k", "s", "", "", "", 0, "", "", []byte(`"a\<"`), []byte("\"\xe2\x80\xa8\""))
	f.Fuzz(func(t *testing.T, ms, seq uint64, kind, subject, run, flowName, step string, attempt int, trigger, corr string, data, meta []byte) {
		e := Event{
			ID: ID{MS: ms % 253402300800000, Seq: seq}, Kind: kind, Subject: subject, RunID: run, FlowName: flowName,
			Step: step, Attempt: attempt, Trigger: trigger, CorrelationID: corr, Data: data, Meta: meta,
		}
		for _, withPosition := range []bool{true, false} {
			want, wantErr := json.Marshal(e.toWire(withPosition))
			var got []byte
			var err error
			if withPosition {
				got, err = e.MarshalJSON()
			} else {
				got, err = e.MarshalBody()
			}
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("position %v: error %v, encoding/json's %v", withPosition, err, wantErr)
			}
			if err == nil && !bytes.Equal(got, want) {
				t.Fatalf("position %v:\n got %s\nwant %s", withPosition, got, want)
			}
		}
	})
}

// BenchmarkMarshal encodes a typical step record (about 256 bytes) as nqd
// does and as encoding/json does through wire.
func BenchmarkMarshal(b *testing.B) {
	e := Event{
		ID: ID{MS: 1764106747116, Seq: 2}, Kind: "step.completed", Subject: "6f1c2a9e-4b7d-4e21-9a3c-58d0b1e7f4aa",
		RunID: "6f1c2a9e-4b7d-4e21-9a3c-58d0b1e7f4aa", FlowName: "resize-images", Step: "thumbnail", Attempt: 1,
		Data: json.RawMessage(`{"result":{"width":320,"height":240,"bytes":18734,"key":"thumbs/6f1c2a9e.jpg"}}`),
		Meta: json.RawMessage(`{"attempt":1,"duration":42}`),
	}
	b.Run("MarshalJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.MarshalJSON(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(e.toWire(true)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestAppendV05 pins the v0.5 rendering: ts in epoch ms, the v0.5 names
// only, stepId given or built, data always present.
func TestAppendV05(t *testing.T) {
	for _, c := range []struct {
		name string
		ev   Event
		want string
	}{
		{"step event", Event{ID: ID{MS: 1764106747116, Seq: 2}, Kind: "step.completed", RunID: "r1", FlowName: "f", Step: "s", Attempt: 2, Subject: "r1",
			Data: json.RawMessage(`{"ok": true}`)},
			`{"id":"1764106747116-2","ts":1764106747116,"type":"step.completed","runId":"r1","flowName":"f","stepName":"s","stepId":"r1__s__attempt-2","attempt":2,"data":{"ok":true}}`},
		{"stepId sent", Event{ID: ID{MS: 5}, Kind: "step.started", RunID: "r1", Step: "s", Meta: json.RawMessage(`{"stepId":"own"}`)},
			`{"id":"5-0","ts":5,"type":"step.started","runId":"r1","stepName":"s","stepId":"own","data":{}}`},
		{"a cancelled run in the UI's spelling", Event{ID: ID{MS: 9}, Kind: "flow.cancelled", RunID: "r1", FlowName: "f"},
			`{"id":"9-0","ts":9,"type":"flow.canceled","runId":"r1","flowName":"f","data":{}}`},
		{"trigger event", Event{ID: ID{MS: 7, Seq: 1}, Kind: "trigger.fired", Trigger: "t<1>"},
			`{"id":"7-1","ts":7,"type":"trigger.fired","triggerName":"t\u003c1\u003e","data":{}}`},
	} {
		got, err := c.ev.AppendV05(nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(got) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

// TestAppendString: a string is written as encoding/json writes it, with
// and without characters to escape.
func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "step.completed", "a\"b", `back\slash`, "<tag>&", "tab\there", "\x00\x1f", "é ü", "\u2028\u2029", "\xff"} {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("AppendString(%q) = %s; want x%s", s, got, want)
		}
	}
}
