package reducers

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzPayloads checks that every payload decodes as json.Unmarshal would
// decode it into the same struct.
func FuzzPayloads(f *testing.F) {
	for _, s := range []string{
		`{"name":"a","flowName":"b","queue":"q","input":{"x":[1,2]}}`,
		`{"result":null,"error":{"message":"m"},"reason":7,"duration":"12"}`,
		`{"error":"e","willRetry":"true","nextAttempt":2,"attempt":"3","maxAttempts":4.5,"stepKey":"s","Step":"x"}`,
		`{"position":"before","awaitType":"webhook","triggerData":{"a":1}}`,
		`{"level":"info","msg":"m\u00e9","message":3}`,
		`{"MSG":"upper","level":null}`, `{"level":"warn","level":3}`, `{"level":"debug"}`,
		`{"event":"e","name":"n","payload":[1]}`,
		`{"type":"set","key":"k","value":{"n":1}}`,
		`{"operations":[{"type":"set","key":"k","value":1},null,3,{"Key":"x"}]}`,
		`{"operations":[{"type":"set"}],"operations":[{"key":"k"}]}`,
		`{"type":"webhook","config":{},"payload":"p","source":"s","reason":"r","duration":1e3}`,
		`{"level":"in` + "\xff" + `fo"}`, `{"a":1,}`, `{"msg":"x"} x`, `{}`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		check(t, b, &startedData{})
		check(t, b, &endedData{})
		check(t, b, &stepPayload{})
		check(t, b, &awaitData{})
		check(t, b, &logData{})
		check(t, b, &levelData{})
		check(t, b, &logText{})
		check(t, b, &emitData{})
		check(t, b, &stateOp{})
		check(t, b, &batchData{})
		check(t, b, &triggerData{})
	})
}

func check[T any, P interface {
	*T
	set(key, val []byte) bool
}](t *testing.T, b []byte, got P) {
	t.Helper()
	decode(b, (*T)(got), got.set)
	want := new(T)
	if len(b) > 0 && b[0] == '{' {
		_ = json.Unmarshal(b, want)
	}
	if !reflect.DeepEqual(got, P(want)) {
		t.Fatalf("decode(%q) into %T = %+v, json.Unmarshal gives %+v", b, got, *got, *want)
	}
}
