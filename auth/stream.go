package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// AnyID in a stream grant covers every context of its type.
const AnyID = "*"

// MinKeyLen is the shortest stream signing secret accepted.
const MinKeyLen = 32

// streamTokenVersion starts every stream token, so that a later format can
// be told apart.
const streamTokenVersion = "v1"

var keyIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// Key signs or verifies stream tokens. Its secret is unexported so that it
// never reaches a log or an encoded config.
type Key struct {
	ID     string
	secret []byte
}

// ParseKeys reads `id:secret` entries separated by commas or whitespace. The
// first key signs; all of them verify, so a new key can be put first while
// tokens signed with the old one run out.
func ParseKeys(text string) ([]Key, error) {
	var keys []Key
	seen := map[string]bool{}
	for i, entry := range strings.FieldsFunc(text, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' }) {
		id, secret, ok := strings.Cut(entry, ":")
		switch {
		case !ok || !keyIDRe.MatchString(id):
			return nil, fmt.Errorf("key %d: want id:secret with an id of letters, digits, _ or -", i+1)
		case len(secret) < MinKeyLen:
			return nil, fmt.Errorf("key %s: the secret is shorter than %d characters", id, MinKeyLen)
		case seen[id]:
			return nil, fmt.Errorf("key %s: used twice", id)
		}
		seen[id] = true
		keys = append(keys, Key{ID: id, secret: []byte(secret)})
	}
	return keys, nil
}

// RandomKey is a key that lives as long as the process: stream tokens it
// signs are not accepted by other instances or after a restart.
func RandomKey() Key {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return Key{ID: "process", secret: b}
}

// Grant is what a stream token allows: reading the stream of one context,
// or of every context of a type when ID is AnyID, until Expires.
type Grant struct {
	Type    string
	ID      string
	Expires time.Time
	// Issuer names the API token the stream token was issued to.
	Issuer string
}

// Covers reports whether g allows the stream of context (typ, id).
func (g Grant) Covers(typ, id string) bool {
	return g.Type == typ && (g.ID == AnyID || g.ID == id)
}

// claims is a stream token's signed payload.
type claims struct {
	Type    string `json:"t"`
	ID      string `json:"i"`
	Expires int64  `json:"e"` // Unix seconds
	Issuer  string `json:"s"`
}

// Signer issues and verifies stream tokens.
type Signer struct {
	keys map[string][]byte
	sign Key
}

// NewSigner signs with keys[0] and verifies with any of keys.
func NewSigner(keys ...Key) (*Signer, error) {
	if len(keys) == 0 {
		return nil, errors.New("auth: a signer needs a key")
	}
	s := &Signer{keys: map[string][]byte{}, sign: keys[0]}
	for _, k := range keys {
		s.keys[k.ID] = k.secret
	}
	return s, nil
}

var b64 = base64.RawURLEncoding

// Issue signs g as a token: v1.<key id>.<payload>.<mac>, URL-safe, so that
// it can travel in a query parameter or a cookie.
func (s *Signer) Issue(g Grant) string {
	payload, _ := json.Marshal(claims{Type: g.Type, ID: g.ID, Expires: g.Expires.Unix(), Issuer: g.Issuer})
	head := streamTokenVersion + "." + s.sign.ID + "." + b64.EncodeToString(payload)
	return head + "." + b64.EncodeToString(mac(s.sign.secret, head))
}

// Verify checks tok's signature and expiry at now. It fails with
// ErrInvalidToken or ErrExpired.
func (s *Signer) Verify(tok string, now time.Time) (Grant, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 4 || parts[0] != streamTokenVersion {
		return Grant{}, ErrInvalidToken
	}
	secret, ok := s.keys[parts[1]]
	if !ok {
		return Grant{}, ErrInvalidToken
	}
	sum, err := b64.DecodeString(parts[3])
	if err != nil || !hmac.Equal(sum, mac(secret, strings.Join(parts[:3], "."))) {
		return Grant{}, ErrInvalidToken
	}
	payload, err := b64.DecodeString(parts[2])
	if err != nil {
		return Grant{}, ErrInvalidToken
	}
	var c claims
	if err := json.Unmarshal(payload, &c); err != nil {
		return Grant{}, ErrInvalidToken
	}
	g := Grant{Type: c.Type, ID: c.ID, Expires: time.Unix(c.Expires, 0), Issuer: c.Issuer}
	if !now.Before(g.Expires) {
		return Grant{}, ErrExpired
	}
	return g, nil
}

func mac(secret []byte, msg string) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(msg))
	return h.Sum(nil)
}

// String names the key without its secret, so that printing a config that
// holds keys shows none.
func (k Key) String() string { return "key " + k.ID }

// GoString is String, for %#v.
func (k Key) GoString() string { return k.String() }
