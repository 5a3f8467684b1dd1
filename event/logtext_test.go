package event

import (
	"encoding/json"
	"testing"
)

func TestLogTextAliases(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{`{"level":"info","msg":"hi"}`, `{"level":"info","message":"hi","msg":"hi"}`, true},
		{`{"level":"warn","message":"hey","n":1}`, `{"level":"warn","message":"hey","msg":"hey","n":1}`, true},
		{`{"msg":"same","message":"same"}`, `{"msg":"same","message":"same"}`, true},
		{`{"msg":"a","message":"b"}`, `{"msg":"a","message":"b"}`, false},
		{`{"level":"info"}`, `{"level":"info"}`, true},
		{`"plain text"`, `"plain text"`, true},
		{``, ``, true},
	} {
		got, ok := LogTextAliases(json.RawMessage(tc.in))
		if string(got) != tc.want || ok != tc.ok {
			t.Errorf("LogTextAliases(%s) = %s, %v; want %s, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	for kind, want := range map[string]bool{"log": true, "log.error": true, "logger": false, "step.log": false} {
		if IsLog(kind) != want {
			t.Errorf("IsLog(%q) = %v", kind, !want)
		}
	}
}
