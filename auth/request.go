package auth

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// Where a browser's EventSource, which cannot send an Authorization header,
// puts its stream token.
const (
	StreamTokenParam  = "access_token" // query parameter, as in RFC 6750 §2.3
	StreamTokenCookie = "nqd_stream"
)

// Authenticator turns a request's credentials into a Principal.
type Authenticator struct {
	tokens *Tokens
	signer *Signer
	now    func() time.Time
}

// New builds an Authenticator. A nil signer gets a RandomKey; a nil now is
// time.Now.
func New(tokens *Tokens, signer *Signer, now func() time.Time) *Authenticator {
	if signer == nil {
		signer, _ = NewSigner(RandomKey())
	}
	if now == nil {
		now = time.Now
	}
	return &Authenticator{tokens: tokens, signer: signer, now: now}
}

// Open reports whether no tokens are configured.
func (a *Authenticator) Open() bool { return a.tokens.Open() }

type principalKey struct{}

type outcome struct {
	p   Principal
	err error
}

// Middleware records who the request's bearer token names in its context,
// or why it names no one; routes decide with FromContext whether that is
// enough. It refuses nothing itself, so that health checks and CORS
// preflights need no token.
func (a *Authenticator) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o := outcome{err: ErrUnauthenticated}
		if a.Open() {
			o = outcome{p: Principal{Open: true, Scope: Admin}}
		} else if secret, ok, err := Bearer(r); err != nil {
			o.err = err
		} else if ok {
			o.p, o.err = a.tokens.Check(secret)
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, o)))
	})
}

// FromContext returns the principal Middleware found, or
// ErrUnauthenticated (or a refinement) when there is none.
func FromContext(ctx context.Context) (Principal, error) {
	o, ok := ctx.Value(principalKey{}).(outcome)
	if !ok {
		return Principal{}, ErrUnauthenticated
	}
	return o.p, o.err
}

// Stream authenticates a request for the stream of context (typ, id); an
// empty typ is a stream of no context, which any valid credential may open.
// A bearer token, when sent, decides; otherwise a stream token from the
// query or the cookie must cover the context. until is the moment the
// stream must end: the stream token's expiry, zero for an API token.
func (a *Authenticator) Stream(r *http.Request, typ, id string) (p Principal, until time.Time, err error) {
	p, err = FromContext(r.Context())
	if p.Open {
		return p, time.Time{}, nil
	}
	if _, sent, _ := Bearer(r); sent {
		if err != nil {
			return Principal{}, time.Time{}, err
		}
		return p, time.Time{}, p.Allows(Read)
	}
	tok := r.URL.Query().Get(StreamTokenParam)
	if tok == "" {
		if c, cerr := r.Cookie(StreamTokenCookie); cerr == nil {
			tok = c.Value
		}
	}
	if tok == "" {
		return Principal{}, time.Time{}, ErrUnauthenticated
	}
	g, err := a.signer.Verify(tok, a.now())
	if err != nil {
		return Principal{}, time.Time{}, err
	}
	p, ok := a.tokens.byName(g.Issuer)
	if !ok {
		return Principal{}, time.Time{}, ErrInvalidToken // the issuing token was removed
	}
	if err := p.Allows(Read); err != nil {
		return Principal{}, time.Time{}, err
	}
	if typ != "" && !g.Covers(typ, id) {
		return Principal{}, time.Time{}, ErrForbidden
	}
	return p, g.Expires, nil
}

// IssueStream signs a stream token for p covering (typ, id), id possibly
// AnyID, valid for at least ttl. The token holds its expiry in whole
// seconds, so the expiry is rounded up: rounding down would let a token of
// ttl 1s issued late in a second expire at once.
func (a *Authenticator) IssueStream(p Principal, typ, id string, ttl time.Duration) (token string, expires time.Time) {
	exact := a.now().Add(ttl)
	expires = exact.Truncate(time.Second)
	if expires.Before(exact) {
		expires = expires.Add(time.Second)
	}
	return a.signer.Issue(Grant{Type: typ, ID: id, Expires: expires, Issuer: p.Name}), expires
}

// StreamLimit caps the streams open at once per client key (a token's name,
// an address).
type StreamLimit struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

// NewStreamLimit allows max streams per key; 0 or less allows any number.
func NewStreamLimit(max int) *StreamLimit {
	return &StreamLimit{max: max, n: map[string]int{}}
}

// Acquire counts one stream against every key, or against none when any of
// them is at its cap. release gives the stream back; call it once.
func (l *StreamLimit) Acquire(keys ...string) (release func(), ok bool) {
	if l.max <= 0 {
		return func() {}, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		if l.n[k] >= l.max {
			return nil, false
		}
	}
	for _, k := range keys {
		l.n[k]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			for _, k := range keys {
				if l.n[k]--; l.n[k] <= 0 {
					delete(l.n, k)
				}
			}
		})
	}, true
}
