package auth

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// FuzzTriggerID: no input panics Verify, and only an id the signer issued
// verifies: any other string, including an issued id with a byte changed, is
// refused.
func FuzzTriggerID(f *testing.F) {
	key := Key{ID: "k1", secret: []byte("0123456789abcdef0123456789abcdef")}
	s, err := NewTriggerSigner(key)
	if err != nil {
		f.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	issued := s.Issue("run-1/approve/1", now.Add(time.Hour))
	f.Add(issued, 0, byte('x'))
	// The decoder skips \r and \n: such a spelling of a valid signature once verified.
	f.Add(issued[:len(issued)-1]+"\r"+issued[len(issued)-1:], 0, byte('x'))
	f.Add("tg1.k1.0.0.0", 3, byte('A'))
	f.Add("", 0, byte(0))
	f.Fuzz(func(t *testing.T, id string, pos int, b byte) {
		if _, err := s.Verify(id, now); err == nil && id != issued {
			t.Fatalf("a string the signer did not issue verifies: %q", id)
		}
		if len(issued) == 0 {
			return
		}
		pos = ((pos % len(issued)) + len(issued)) % len(issued)
		if issued[pos] == b {
			return
		}
		tampered := issued[:pos] + string(b) + issued[pos+1:]
		if _, err := s.Verify(tampered, now); err == nil {
			t.Fatalf("a tampered id verifies: %q", tampered)
		}
	})
}

var secretLike = regexp.MustCompile(`^[A-Za-z0-9]{16,}$`)

// FuzzParseTokens: token configuration never panics the parser, a parsed
// token verifies with its secret, and a parse error never repeats a secret.
func FuzzParseTokens(f *testing.F) {
	f.Add("ui", "read", "0123456789abcdef0123456789abcdef")
	f.Add("w", "write", "sha256:"+strings.Repeat("ab", 32))
	f.Add("", ":", ",")
	f.Fuzz(func(t *testing.T, name, scope, secret string) {
		toks, err := ParseTokens(name + ":" + scope + ":" + secret)
		if err != nil {
			// A secret-like value that is not also the name or scope must
			// never be echoed.
			echoed := strings.Contains(name, secret) || strings.Contains(scope, secret)
			if secretLike.MatchString(secret) && !echoed && strings.Contains(err.Error(), secret) {
				t.Fatalf("the error repeats the secret: %v", err)
			}
			return
		}
		// Separators split an entry, so such a secret is not the one kept.
		if len(toks) != 1 || strings.HasPrefix(secret, "sha256:") || strings.ContainsAny(name+scope+secret, ", \t\r\n") {
			return
		}
		p, err := NewTokens(toks).Check(secret)
		if err != nil || p.Name != toks[0].Name {
			t.Fatalf("token %q does not verify with its own secret: %v", toks[0].Name, err)
		}
	})
}
