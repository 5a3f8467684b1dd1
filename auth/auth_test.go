package auth_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/auth"
)

const (
	readSecret  = "r0000000000000000000000000000000000000000"
	adminSecret = "a0000000000000000000000000000000000000000"
)

func mustTokens(t *testing.T, text string) *auth.Tokens {
	t.Helper()
	toks, err := auth.ParseTokens(text)
	if err != nil {
		t.Fatalf("ParseTokens: %v", err)
	}
	return auth.NewTokens(toks)
}

func TestParseTokens(t *testing.T) {
	text := "# the dashboard\nui:read:" + readSecret + "\nops:admin:" + auth.Hash(adminSecret) + ", w:write:" + strings.Repeat("w", 32)
	toks := mustTokens(t, text)
	for _, tt := range []struct {
		secret string
		name   string
		scope  auth.Scope
	}{{readSecret, "ui", auth.Read}, {adminSecret, "ops", auth.Admin}, {strings.Repeat("w", 32), "w", auth.Write}} {
		p, err := toks.Check(tt.secret)
		if err != nil || p.Name != tt.name || p.Scope != tt.scope {
			t.Errorf("Check(%s…) = %+v, %v; want %s with %s", tt.secret[:4], p, err, tt.name, tt.scope)
		}
	}
	if _, err := toks.Check("nope"); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("unknown secret: err %v, want ErrUnauthenticated", err)
	}
}

func TestParseTokensRejects(t *testing.T) {
	for _, text := range []string{
		"ui:read",                // no secret
		"ui:root:" + readSecret,  // unknown scope
		"ui:read:short",          // weak secret
		"ui:read:sha256:abcd",    // bad hash
		"u i:read:" + readSecret, // splits into a bad entry
		"ui:read:" + readSecret + " ui:admin:" + adminSecret, // name twice
	} {
		_, err := auth.ParseTokens(text)
		if err == nil {
			t.Errorf("ParseTokens(%q) accepted it", text)
			continue
		}
		if strings.Contains(err.Error(), readSecret) || strings.Contains(err.Error(), adminSecret) {
			t.Errorf("error shows a secret: %v", err)
		}
	}
}

func TestScopesAreOrdered(t *testing.T) {
	p := auth.Principal{Name: "w", Scope: auth.Write}
	if p.Allows(auth.Read) != nil || p.Allows(auth.Write) != nil {
		t.Error("write must allow read and write")
	}
	if err := p.Allows(auth.Admin); !errors.Is(err, auth.ErrForbidden) {
		t.Errorf("write on admin: %v, want ErrForbidden", err)
	}
}

func mustKeys(t *testing.T, text string) []auth.Key {
	t.Helper()
	keys, err := auth.ParseKeys(text)
	if err != nil {
		t.Fatalf("ParseKeys: %v", err)
	}
	return keys
}

func TestStreamTokens(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	oldKey := "k1:" + strings.Repeat("1", 32)
	newKey := "k2:" + strings.Repeat("2", 32)
	before, _ := auth.NewSigner(mustKeys(t, oldKey)...)
	rotated, _ := auth.NewSigner(mustKeys(t, newKey+","+oldKey)...)
	after, _ := auth.NewSigner(mustKeys(t, newKey)...)

	g := auth.Grant{Type: "flow", ID: "run-1", Expires: now.Add(time.Minute), Issuer: "ui"}
	tok := before.Issue(g)
	got, err := rotated.Verify(tok, now)
	if err != nil || got != g {
		t.Fatalf("a token of the old key during rotation: %+v, %v; want %+v", got, err, g)
	}
	if _, err := after.Verify(tok, now); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("a token of a retired key: %v, want ErrInvalidToken", err)
	}
	if _, err := rotated.Verify(tok, now.Add(time.Minute)); !errors.Is(err, auth.ErrExpired) {
		t.Errorf("at expiry: %v, want ErrExpired", err)
	}
	parts := strings.Split(tok, ".")
	forged := auth.Grant{Type: "flow", ID: auth.AnyID, Expires: g.Expires, Issuer: "ui"}
	forgedPayload := strings.Split(after.Issue(forged), ".")[2]
	if _, err := rotated.Verify(strings.Join([]string{parts[0], parts[1], forgedPayload, parts[3]}, "."), now); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("a payload swapped under the old signature: %v, want ErrInvalidToken", err)
	}
	if !forged.Covers("flow", "any") || forged.Covers("trigger", "any") || g.Covers("flow", "run-2") {
		t.Error("Covers: a grant reaches beyond its type or id")
	}
}

func TestParseKeysRejects(t *testing.T) {
	for _, text := range []string{"k1", "k1:short", "k 1:" + strings.Repeat("x", 32), "k:" + strings.Repeat("x", 32) + ",k:" + strings.Repeat("y", 32)} {
		if _, err := auth.ParseKeys(text); err == nil {
			t.Errorf("ParseKeys(%q) accepted it", text)
		}
	}
}

// serve runs r through the middleware and returns the Stream answer for
// (typ, id).
func streamAuth(a *auth.Authenticator, r *http.Request, typ, id string) (auth.Principal, time.Time, error) {
	var (
		p     auth.Principal
		until time.Time
		err   error
	)
	a.Middleware(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		p, until, err = a.Stream(r, typ, id)
	})).ServeHTTP(httptest.NewRecorder(), r)
	return p, until, err
}

func TestStreamAuthentication(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	a := auth.New(mustTokens(t, "ui:read:"+readSecret), nil, clock)
	tok, exp := a.IssueStream(auth.Principal{Name: "ui", Scope: auth.Read}, "flow", "run-1", time.Minute)
	if !exp.Equal(now.Add(time.Minute)) {
		t.Errorf("expiry %s, want %s", exp, now.Add(time.Minute))
	}

	byQuery := httptest.NewRequest(http.MethodGet, "/s?"+auth.StreamTokenParam+"="+tok, nil)
	p, until, err := streamAuth(a, byQuery, "flow", "run-1")
	if err != nil || p.Name != "ui" || !until.Equal(exp) {
		t.Errorf("by query: %+v until %s, %v", p, until, err)
	}
	byCookie := httptest.NewRequest(http.MethodGet, "/s", nil)
	byCookie.AddCookie(&http.Cookie{Name: auth.StreamTokenCookie, Value: tok})
	if _, _, err := streamAuth(a, byCookie, "flow", "run-1"); err != nil {
		t.Errorf("by cookie: %v", err)
	}
	if _, _, err := streamAuth(a, byQuery, "flow", "run-2"); !errors.Is(err, auth.ErrForbidden) {
		t.Errorf("another context: %v, want ErrForbidden", err)
	}
	if _, _, err := streamAuth(a, httptest.NewRequest(http.MethodGet, "/s", nil), "flow", "run-1"); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("no token: %v, want ErrUnauthenticated", err)
	}
	bearer := httptest.NewRequest(http.MethodGet, "/s", nil)
	bearer.Header.Set("Authorization", "Bearer "+readSecret)
	if _, until, err := streamAuth(a, bearer, "flow", "run-2"); err != nil || !until.IsZero() {
		t.Errorf("an API token: until %s, %v; want no expiry", until, err)
	}

	now = exp
	if _, _, err := streamAuth(a, byQuery, "flow", "run-1"); !errors.Is(err, auth.ErrExpired) {
		t.Errorf("expired: %v, want ErrExpired", err)
	}
	now = exp.Add(-time.Second)
	revoked := auth.New(mustTokens(t, "other:read:"+adminSecret), nil, clock)
	if _, _, err := streamAuth(revoked, byQuery, "flow", "run-1"); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("signed by another process's key: %v, want ErrInvalidToken", err)
	}
}

// TestStreamTokenLivesItsTTL issues tokens at instants across a second: the
// token holds whole seconds, and whatever the fraction at issue it must be
// accepted until its TTL has passed and refused once its expiry is reached.
func TestStreamTokenLivesItsTTL(t *testing.T) {
	base := time.Unix(1_800_000_000, 0)
	for _, frac := range []time.Duration{0, time.Nanosecond, 400 * time.Millisecond, time.Second - time.Nanosecond} {
		for _, ttl := range []time.Duration{time.Second, time.Minute} {
			now := base.Add(frac)
			a := auth.New(mustTokens(t, "ui:read:"+readSecret), nil, func() time.Time { return now })
			tok, exp := a.IssueStream(auth.Principal{Name: "ui", Scope: auth.Read}, "flow", "run-1", ttl)
			issued := now
			if exp.Before(issued.Add(ttl)) || !exp.Before(issued.Add(ttl+time.Second)) {
				t.Errorf("issued at +%v with ttl %v: expiry %s, want in [%s, %s)", frac, ttl, exp, issued.Add(ttl), issued.Add(ttl+time.Second))
			}
			r := httptest.NewRequest(http.MethodGet, "/s?"+auth.StreamTokenParam+"="+tok, nil)
			now = issued.Add(ttl - time.Nanosecond)
			if _, until, err := streamAuth(a, r, "flow", "run-1"); err != nil || !until.Equal(exp) {
				t.Errorf("issued at +%v with ttl %v, just before the ttl passed: until %s, %v; want accepted until %s", frac, ttl, until, err, exp)
			}
			now = exp
			if _, _, err := streamAuth(a, r, "flow", "run-1"); !errors.Is(err, auth.ErrExpired) {
				t.Errorf("issued at +%v with ttl %v, at its expiry: %v, want ErrExpired", frac, ttl, err)
			}
		}
	}
}

func TestStreamLimit(t *testing.T) {
	l := auth.NewStreamLimit(2)
	r1, ok1 := l.Acquire("tok:a", "addr:1")
	_, ok2 := l.Acquire("tok:a", "addr:2")
	if !ok1 || !ok2 {
		t.Fatal("the first two streams of a token were refused")
	}
	if _, ok := l.Acquire("tok:a", "addr:3"); ok {
		t.Fatal("a third stream of a token was allowed")
	}
	if _, ok := l.Acquire("tok:b", "addr:1"); !ok {
		t.Fatal("another token on a shared address under its cap was refused")
	}
	r1()
	r1() // a second release must not free another stream's slot
	if _, ok := l.Acquire("tok:a", "addr:3"); !ok {
		t.Fatal("a released slot was not given back")
	}
	if _, ok := l.Acquire("tok:a", "addr:4"); ok {
		t.Fatal("a double release freed two slots")
	}
}
