package event

import (
	"regexp"
	"strings"
	"testing"
)

// The loops in names.go stand for these patterns.
var (
	typeRe = regexp.MustCompile(typePattern)
	idRe   = regexp.MustCompile(idPattern)
	kindRe = regexp.MustCompile(kindPattern)
)

var nameSeeds = []string{
	"", "a", "s", "flow", "flows", "my-type_2", "A", "1a", "a:b", "a b", "a\x00",
	"run-1", "Run.1~x", ".x", "~", "list", "step.completed", "a..b", "a.", ".a",
	"flow.run_started.2", "Step.x", "a.B", "é", "aé", strings.Repeat("a", 32),
	strings.Repeat("a", 33), strings.Repeat("x", 128), strings.Repeat("x", 129),
}

func FuzzNameRules(f *testing.F) {
	for _, s := range nameSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := matchType(s), typeRe.MatchString(s); got != want {
			t.Errorf("matchType(%q) = %v, pattern says %v", s, got, want)
		}
		if got, want := matchID(s), idRe.MatchString(s); got != want {
			t.Errorf("matchID(%q) = %v, pattern says %v", s, got, want)
		}
		if got, want := matchKind(s), kindRe.MatchString(s); got != want {
			t.Errorf("matchKind(%q) = %v, pattern says %v", s, got, want)
		}
	})
}

func BenchmarkNameRules(b *testing.B) {
	const id = "01JABCDEF0123456789XYZ-run"
	b.Run("loop", func(b *testing.B) {
		for range b.N {
			_ = matchID(id) && matchKind("step.completed") && matchType("flow")
		}
	})
	b.Run("regexp", func(b *testing.B) {
		for range b.N {
			_ = idRe.MatchString(id) && kindRe.MatchString("step.completed") && typeRe.MatchString("flow")
		}
	})
}
