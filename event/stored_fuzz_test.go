package event

import (
	"bytes"
	"testing"
)

// FuzzDecodeStored feeds stream entries as another writer may have left them:
// decoding never panics, and what decodes stores and decodes back the same.
func FuzzDecodeStored(f *testing.F) {
	f.Add([]byte(`{"kind":"log","subject":"r","data":{"msg":"x"}}`))
	f.Add([]byte(`{"type":"step.started","runId":"r","stepName":"a","attempt":2,"meta":{"attempt":2}}`))
	f.Add([]byte(`{"kind":"flow.started","data":null,"meta":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		id := ID{MS: 1719667800000, Seq: 3}
		e, err := DecodeStored(id, body)
		if err != nil {
			return
		}
		if e.ID != id {
			t.Fatalf("decoded at %v, want %v", e.ID, id)
		}
		stored, err := e.MarshalBody()
		if err != nil {
			t.Fatalf("a decoded entry does not store: %v", err)
		}
		again, err := DecodeStored(id, stored)
		if err != nil {
			t.Fatalf("a stored entry does not decode: %v\n%s", err, stored)
		}
		restored, err := again.MarshalBody()
		if err != nil || !bytes.Equal(stored, restored) {
			t.Fatalf("storing is not stable:\n%s\n%s", stored, restored)
		}
	})
}

// FuzzDecodeNodeFields feeds entries in the Node module's field layout.
func FuzzDecodeNodeFields(f *testing.F) {
	f.Add("step.completed", "r1", "demo", `{"ok":true}`, "a", "2", "2024-06-29T12:00:00.000Z")
	f.Add("log", "unknown", "unknown", `not json`, "", "x", "")
	f.Add("", "", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, kind, run, flowName, data, step, attempt, ts string) {
		fields := map[string]string{
			"type": kind, "runId": run, "flowName": flowName, "data": data,
			"stepName": step, "attempt": attempt, "ts": ts,
		}
		e, err := DecodeNodeFields(ID{MS: 1, Seq: 0}, "r1", fields)
		if err != nil {
			return
		}
		if e.Kind != kind {
			t.Fatalf("kind %q, want %q", e.Kind, kind)
		}
		if _, err := e.MarshalJSON(); err != nil {
			t.Fatalf("a decoded Node entry does not encode: %v", err)
		}
	})
}
