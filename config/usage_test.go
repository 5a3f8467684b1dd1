package config

import (
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
)

// TestHelpListsEverySetting: -h shows every setting, those read from the
// environment only as well.
func TestHelpListsEverySetting(t *testing.T) {
	var out strings.Builder
	if _, err := Load([]string{"-h"}, env(nil), &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
	for _, s := range settings(&Config{}) {
		if !strings.Contains(out.String(), s.env) {
			t.Errorf("-h does not show %s:\n%s", s.env, out.String())
		}
	}
	for _, name := range []string{"NQ_TOKENS", "NQ_TRIGGER_KEYS", "NQ_STREAM_TOKEN_KEYS", "NQ_PPROF_ADDR"} {
		if !strings.Contains(out.String(), "\n  "+name+"\n") {
			t.Errorf("-h does not list %s among the environment-only settings", name)
		}
	}
}

func TestUnknownSettings(t *testing.T) {
	got := Unknown([]string{"NQ_ADR=127.0.0.1:9000", "NQ_ADDR=127.0.0.1:8080", "PATH=/bin", "NQD_URL=http://x", "NQ_ZZZZZZZZZZ=1", "NQ_TOKENS=x"})
	if len(got) != 2 {
		t.Fatalf("warnings %q, want one for NQ_ADR and one for NQ_ZZZZZZZZZZ", got)
	}
	if !strings.Contains(got[0], "NQ_ADR ") || !strings.Contains(got[0], "did you mean NQ_ADDR?") {
		t.Errorf("warning %q, want NQ_ADR named with NQ_ADDR suggested", got[0])
	}
	if !strings.Contains(got[1], "NQ_ZZZZZZZZZZ") || strings.Contains(got[1], "did you mean") {
		t.Errorf("warning %q, want NQ_ZZZZZZZZZZ named with no suggestion", got[1])
	}
	if slices.ContainsFunc(got, func(w string) bool { return strings.Contains(w, "NQD_URL") }) {
		t.Error("NQD_ variables are the SDKs' and tools', not nqd's settings")
	}
}
