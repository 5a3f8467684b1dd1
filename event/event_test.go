package event

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseID(t *testing.T) {
	tests := []struct {
		in   string
		want ID
		err  bool
	}{
		{in: "1719667800000-0", want: ID{1719667800000, 0}},
		{in: "1719667800000-17", want: ID{1719667800000, 17}},
		{in: "1719667800000", want: ID{1719667800000, 0}},
		{in: "", err: true},
		{in: "-1", err: true},
		{in: "12-", err: true},
		{in: "abc-1", err: true},
		{in: "1-2-3", err: true},
		{in: "99999999999999999999999-0", err: true},
	}
	for _, tt := range tests {
		got, err := ParseID(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseID(%q) = %v, %v; want %v, err %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestIDOrder(t *testing.T) {
	a, b := ID{5, 1}, ID{5, 2}
	if a.Compare(b) != -1 || b.Compare(a) != 1 || a.Compare(a) != 0 {
		t.Fatal("Compare does not order by seq within a millisecond")
	}
	if (ID{4, ^uint64(0)}).Next() != (ID{5, 0}) {
		t.Fatal("Next does not carry into the next millisecond")
	}
	at := time.UnixMilli(5).UTC()
	if IDAt(at).Compare(ID{5, 99}) != 1 || IDAt(at).Compare(ID{6, 0}) != -1 {
		t.Fatal("IDAt must sort after every id of its millisecond and before the next")
	}
}

func TestMarshalWritesBothSpellings(t *testing.T) {
	e := Event{
		ID: ID{1719667800100, 0}, Kind: "step.started", Subject: "run-1", RunID: "run-1",
		FlowName: "f", Step: "fetch", Attempt: 2, Meta: json.RawMessage(`{"attempt":2}`),
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"1719667800100-0","ts":"2024-06-29T13:30:00.100Z","kind":"step.started","type":"step.started",` +
		`"subject":"run-1","flow":"run-1","runId":"run-1","flowName":"f","step":"fetch","stepName":"fetch",` +
		`"attempt":2,"meta":{"attempt":2}}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	var back Event
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(e, back); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
}

func TestMarshalBodyHasNoPosition(t *testing.T) {
	e := Event{ID: ID{1, 0}, Kind: "log", Subject: "x", Data: json.RawMessage(`{"msg":"hi"}`)}
	b, _ := e.MarshalBody()
	if string(b) != `{"kind":"log","type":"log","subject":"x","data":{"msg":"hi"}}` {
		t.Fatalf("got %s", b)
	}
	got, err := DecodeStored(ID{7, 1}, b)
	if err != nil || got.ID != (ID{7, 1}) || got.Kind != "log" || string(got.Data) != `{"msg":"hi"}` {
		t.Fatalf("DecodeStored = %+v, %v", got, err)
	}
}

func TestDecodeNodeFields(t *testing.T) {
	got, err := DecodeNodeFields(ID{1761754554859, 0}, "64fc", map[string]string{
		"type": "step.started", "runId": "64fc", "flowName": "example-flow",
		"data": `{"jobId":"17","name":"first_step"}`, "ts": "2025-10-29T16:15:54.850Z",
		"stepName": "first_step", "stepId": "64fc__first_step__attempt-1", "attempt": "1",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Event{
		ID: ID{1761754554859, 0}, Kind: "step.started", Subject: "64fc", RunID: "64fc", FlowName: "example-flow",
		Step: "first_step", Attempt: 1, Data: json.RawMessage(`{"jobId":"17","name":"first_step"}`),
		Meta: json.RawMessage(`{"attempt":1,"stepId":"64fc__first_step__attempt-1"}`),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if _, err := DecodeNodeFields(ID{1, 0}, "x", map[string]string{"e": "{}"}); err != ErrNotNodeEntry {
		t.Fatalf("an entry without type: got %v, want ErrNotNodeEntry", err)
	}
}

func TestNameRules(t *testing.T) {
	for _, s := range []string{"a:b", "*", "list", "", " x", "x{y}", string(make([]byte, 200))} {
		if ValidContextID(s) {
			t.Errorf("ValidContextID(%q) = true", s)
		}
	}
	for _, s := range []string{"64fc8be3-8adf-459c-a837-5727abd5df94", "run_1.x~y"} {
		if !ValidContextID(s) {
			t.Errorf("ValidContextID(%q) = false", s)
		}
	}
	for _, s := range []string{"Flow", "a:b", "1x", "", "flows", "triggers", "await", "kv"} {
		if ValidType(s) {
			t.Errorf("ValidType(%q) = true", s)
		}
	}
	for _, s := range []string{"flow", "trigger", "webhook", "job_run", "a-b"} {
		if !ValidType(s) {
			t.Errorf("ValidType(%q) = false", s)
		}
	}
	for _, s := range []string{"Step.started", "step..x", ".x", "step.", "a b"} {
		if ValidKind(s) {
			t.Errorf("ValidKind(%q) = true", s)
		}
	}
}

func FuzzParseID(f *testing.F) {
	for _, s := range []string{"1-0", "1719667800000-17", "", "-", "1-", "18446744073709551615-18446744073709551615"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseID(s)
		if err != nil {
			return
		}
		back, err := ParseID(id.String())
		if err != nil || back != id {
			t.Fatalf("%q parsed to %v, which does not round-trip: %v %v", s, id, back, err)
		}
	})
}

func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte(`{"id":"1-0","kind":"log","data":{"msg":"x"}}`))
	f.Add([]byte(`{"type":"step.started","runId":"r","attempt":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var e Event
		if err := json.Unmarshal(b, &e); err != nil {
			return
		}
		out, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("a decoded record does not encode: %v", err)
		}
		var again Event
		if err := json.Unmarshal(out, &again); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		out2, err := json.Marshal(again)
		if err != nil || string(out) != string(out2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", out, out2)
		}
	})
}
