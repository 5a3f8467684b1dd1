// Package auth is nqd's access control: API tokens with scopes, kept only as
// SHA-256 hashes; short-lived signed stream tokens for EventSource, which
// cannot send headers; the principal a request acts as; and the count of
// open streams per client.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/nqd-dev/nqd"
)

// The errors a request is refused with. ErrUnauthenticated and its
// refinements answer 401; ErrForbidden answers 403.
var (
	ErrUnauthenticated error = &nqd.Error{Code: nqd.CodeUnauthorized, Message: "A valid token is required: send Authorization: Bearer <token>."}
	ErrInvalidToken          = fmt.Errorf("%w: invalid token", ErrUnauthenticated)
	ErrExpired         error = &nqd.Error{Code: nqd.CodeUnauthorized, Message: "The token has expired; get a new one.", Err: ErrUnauthenticated}
	ErrForbidden       error = &nqd.Error{Code: nqd.CodeForbidden, Message: "The token does not allow this."}
)

// Scope is what a token may do. Scopes are ordered: admin may do what write
// may, and write what read may, so one scope per token is enough.
type Scope int

// The scopes, weakest first.
const (
	Read  Scope = iota + 1 // GET routes and streams
	Write                  // appends, starting runs, the worker protocol
	Admin                  // flow definitions, cancel, restart, clear-history
)

var scopeNames = map[Scope]string{Read: "read", Write: "write", Admin: "admin"}

func (s Scope) String() string {
	if n, ok := scopeNames[s]; ok {
		return n
	}
	return fmt.Sprintf("Scope(%d)", int(s))
}

// ParseScope reads a scope's name.
func ParseScope(s string) (Scope, error) {
	for sc, n := range scopeNames {
		if n == s {
			return sc, nil
		}
	}
	return 0, fmt.Errorf("unknown scope %q (want read, write or admin)", s)
}

// nameRe keeps token names printable in logs and usable as limit keys.
var nameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// MinSecretLen is the shortest secret accepted in clear: 128 bits of hex.
const MinSecretLen = 32

// Token is a configured API token. Only the hash of its secret is kept, so
// neither a log line nor a memory dump of the config shows the secret.
type Token struct {
	Name  string // who holds it; appears in logs and limit keys
	Scope Scope
	hash  [sha256.Size]byte
}

// ParseTokens reads token entries separated by newlines, commas or spaces:
// `name:scope:secret`, whose secret is hashed here, or
// `name:scope:sha256:<64 hex digits>`, already hashed. Lines starting with #
// are comments. Errors name the entry by its position, never its secret.
func ParseTokens(text string) ([]Token, error) {
	var toks []Token
	seen := map[string]bool{}
	n := 0
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, entry := range strings.FieldsFunc(line, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\r' }) {
			n++
			t, err := parseToken(entry)
			if err != nil {
				return nil, fmt.Errorf("token %d: %w", n, err)
			}
			if seen[t.Name] {
				return nil, fmt.Errorf("token %d: name %q is used twice", n, t.Name)
			}
			seen[t.Name] = true
			toks = append(toks, t)
		}
	}
	return toks, nil
}

func parseToken(entry string) (Token, error) {
	name, rest, ok1 := strings.Cut(entry, ":")
	scope, secret, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 {
		return Token{}, errors.New("want name:scope:secret or name:scope:sha256:<hex>")
	}
	if !nameRe.MatchString(name) {
		return Token{}, fmt.Errorf("name %q: want letters, digits, ., _ or -, at most 64", name)
	}
	t := Token{Name: name}
	var err error
	if t.Scope, err = ParseScope(scope); err != nil {
		return Token{}, fmt.Errorf("%s: %w", name, err)
	}
	if h, ok := strings.CutPrefix(secret, "sha256:"); ok {
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != sha256.Size {
			return Token{}, fmt.Errorf("%s: want sha256: and 64 hex digits", name)
		}
		copy(t.hash[:], b)
		return t, nil
	}
	if len(secret) < MinSecretLen {
		return Token{}, fmt.Errorf("%s: the secret is shorter than %d characters", name, MinSecretLen)
	}
	t.hash = sha256.Sum256([]byte(secret))
	return t, nil
}

// Hash is the form a secret takes in a tokens file: sha256: and the hex
// digest of the secret.
func Hash(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return "sha256:" + hex.EncodeToString(h[:])
}

// NewSecret returns a fresh random token secret (256 bits, hex).
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// Principal is who a request acts as.
type Principal struct {
	// Name is the token's name; empty when nqd runs without tokens.
	Name  string
	Scope Scope
	// Open says that no tokens are configured and everything is allowed.
	Open bool
}

// Allows reports whether p may act with scope s; the error is ErrForbidden.
func (p Principal) Allows(s Scope) error {
	if p.Open || p.Scope >= s {
		return nil
	}
	return fmt.Errorf("%w: token %q has scope %s, the route needs %s", ErrForbidden, p.Name, p.Scope, s)
}

// Tokens checks presented secrets against the configured tokens.
type Tokens struct {
	toks []Token
}

// NewTokens builds the checker; no tokens means every request is allowed.
func NewTokens(toks []Token) *Tokens {
	return &Tokens{toks: toks}
}

// Open reports whether no tokens are configured.
func (t *Tokens) Open() bool { return len(t.toks) == 0 }

// Check finds the token whose secret is presented. Every configured hash is
// compared, in constant time, so the answer's timing tells nothing of which
// one came close.
func (t *Tokens) Check(secret string) (Principal, error) {
	if t.Open() {
		return Principal{Open: true, Scope: Admin}, nil
	}
	h := sha256.Sum256([]byte(secret))
	found := -1
	for i := range t.toks {
		if subtle.ConstantTimeCompare(h[:], t.toks[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, ErrInvalidToken
	}
	return Principal{Name: t.toks[found].Name, Scope: t.toks[found].Scope}, nil
}

// byName is the principal of the token named name, which a stream token
// names as its issuer: removing that token revokes its stream tokens too.
func (t *Tokens) byName(name string) (Principal, bool) {
	if t.Open() {
		return Principal{Open: true, Scope: Admin}, true
	}
	for _, tok := range t.toks {
		if tok.Name == name {
			return Principal{Name: tok.Name, Scope: tok.Scope}, true
		}
	}
	return Principal{}, false
}

// Bearer reads the secret of an `Authorization: Bearer` header; ok is false
// when the header is absent. A header of another scheme is an invalid token.
func Bearer(r *http.Request) (secret string, ok bool, err error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false, nil
	}
	scheme, secret, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
		return "", true, ErrInvalidToken
	}
	return strings.TrimSpace(secret), true, nil
}

// String names the token and its scope; the hash stays out of logs too.
func (t Token) String() string { return t.Name + ":" + t.Scope.String() }

// GoString is String, for %#v.
func (t Token) GoString() string { return t.String() }
