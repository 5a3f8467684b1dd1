package handlers

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/go-chi/httprate"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/event"
)

// Rate is a request budget: Requests per Window. The zero Rate is no limit.
type Rate struct {
	Requests int
	Window   time.Duration
}

// Access says who may call which route and how much. The zero value is open
// (every route for everyone) with no limits, which nqd only allows on a
// loopback address.
type Access struct {
	// Auth checks tokens; nil leaves every route open.
	Auth *auth.Authenticator
	// PerToken bounds the appends, starts and trigger POSTs of a request
	// with a verified token, per token; PerAddr those of a request without
	// one, per client address.
	PerToken, PerAddr Rate
	// MaxStreams caps the streams open at once per token and per address;
	// 0 is no cap.
	MaxStreams int
	// MaxStreamTokenTTL is the longest life a stream token may ask for;
	// DefaultMaxStreamTokenTTL when zero.
	MaxStreamTokenTTL time.Duration
	// PublicMetrics serves /metrics without a token, for scrapers that
	// cannot send one.
	PublicMetrics bool
	// TrustedProxies are the peers whose X-Forwarded-For or Forwarded
	// header names the client; from any other peer those headers are
	// ignored. None by default.
	TrustedProxies []netip.Prefix
}

// The default budgets are above what one nqd serves (a few thousand runs
// and tens of thousands of appends a second), so a single busy app never
// meets them: they stop a runaway or hostile client from starving the
// others, and are no quota.
var (
	DefaultRatePerToken = Rate{Requests: 20000, Window: time.Second}
	DefaultRatePerAddr  = Rate{Requests: 20000, Window: time.Second}
)

// Stream token lifetimes.
const (
	DefaultStreamTokenTTL    = 5 * time.Minute
	DefaultMaxStreamTokenTTL = time.Hour
)

// streamRetryAfter is what a client over its stream cap is asked to wait.
const streamRetryAfter = "5"

// access is Access made ready to serve.
type access struct {
	Access
	tokenRate, addrRate *httprate.RateLimiter
	streams             *auth.StreamLimit
}

func newAccess(a Access, now func() time.Time) access {
	if a.Auth == nil {
		a.Auth = auth.New(auth.NewTokens(nil), nil, now)
	}
	if a.MaxStreamTokenTTL <= 0 {
		a.MaxStreamTokenTTL = DefaultMaxStreamTokenTTL
	}
	ac := access{Access: a, streams: auth.NewStreamLimit(a.MaxStreams)}
	// The rate headers name the budget that refused, not a generic one;
	// Retry-After is all a client needs.
	quiet := httprate.WithResponseHeaders(httprate.ResponseHeaders{RetryAfter: "Retry-After"})
	if a.PerToken.Requests > 0 {
		ac.tokenRate = httprate.NewRateLimiter(a.PerToken.Requests, a.PerToken.Window, quiet)
	}
	if a.PerAddr.Requests > 0 {
		ac.addrRate = httprate.NewRateLimiter(a.PerAddr.Requests, a.PerAddr.Window, quiet)
	}
	return ac
}

// require refuses a request whose principal lacks scope s: 401 without a
// valid token, 403 with a token of a weaker scope.
func (a *API) require(s auth.Scope) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, err := auth.FromContext(r.Context())
			if err == nil {
				err = p.Allows(s)
			}
			if err != nil {
				writeError(w, r, err)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// limitRate spends one request of the client's budget and answers 429 with
// Retry-After once it is spent. A verified token is the client, whatever
// address it calls from (a Nuxt server calls for all its users); without one
// (an open nqd, a trigger webhook) the address is. It runs after the scope
// check, so only a verified token has a budget.
func (a *API) limitRate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The settings are named so that a client told no learns what
		// raises the limit.
		limiter, key, budget, who, setting := a.access.addrRate, "addr:"+clientAddr(r), a.access.PerAddr, "address", "NQ_RATE_PER_ADDR"
		if p, err := auth.FromContext(r.Context()); err == nil && !p.Open && p.Name != "" {
			limiter, key, budget, who, setting = a.access.tokenRate, "token:"+p.Name, a.access.PerToken, "token", "NQ_RATE_PER_TOKEN"
		}
		if limiter != nil && limiter.OnLimit(w, r, key) {
			writeError(w, r, &nqd.Error{Code: nqd.CodeRateLimited, Message: fmt.Sprintf(
				"Too many requests from this %s: more than %d in %s. Retry after the time in Retry-After; %s raises the limit.",
				who, budget.Requests, windowText(budget.Window), setting)})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// windowText writes a rate's window the way it is configured, 1m rather
// than 1m0s.
func windowText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// clientKeys are the keys a client's open streams are counted under.
func clientKeys(r *http.Request, p auth.Principal) []string {
	keys := []string{"addr:" + clientAddr(r)}
	if !p.Open {
		keys = append(keys, "token:"+p.Name)
	}
	return keys
}

// streamTokenRequest asks for a stream token.
type streamTokenRequest struct {
	Type string `json:"type" validate:"context_type"`
	// ID is a context id, or * for every context of the type.
	ID string `json:"id" validate:"required"`
	// TTL is the token's life in seconds; DefaultStreamTokenTTL when 0.
	TTL int `json:"ttl" validate:"gte=0"`
	// Cookie asks for the token in the nqd_stream cookie as well.
	Cookie bool `json:"cookie"`
}

type streamTokenBody struct {
	Token     string `json:"token"`
	Type      string `json:"type"`
	ID        string `json:"id"`
	ExpiresAt string `json:"expiresAt"`
}

// issueStreamToken signs a short-lived token that lets an EventSource, which
// cannot send headers, open the streams of one context or of one type.
func (a *API) issueStreamToken(w http.ResponseWriter, r *http.Request) error {
	var req streamTokenRequest
	if err := a.decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.ID != auth.AnyID && !event.ValidContextID(req.ID) {
		return invalidField("id", "must be a context id or *")
	}
	ttl := time.Duration(req.TTL) * time.Second
	if ttl == 0 {
		ttl = min(DefaultStreamTokenTTL, a.access.MaxStreamTokenTTL)
	}
	if ttl > a.access.MaxStreamTokenTTL {
		return invalidField("ttl", "at most "+a.access.MaxStreamTokenTTL.String())
	}
	p, _ := auth.FromContext(r.Context())
	tok, exp := a.access.Auth.IssueStream(p, req.Type, req.ID, ttl)
	if req.Cookie {
		http.SetCookie(w, &http.Cookie{
			Name:     auth.StreamTokenCookie,
			Value:    tok,
			Path:     "/api/_events",
			Expires:  exp,
			HttpOnly: true,
			Secure:   r.TLS != nil,
			SameSite: http.SameSiteStrictMode,
		})
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, r, http.StatusCreated, streamTokenBody{Token: tok, Type: req.Type, ID: req.ID, ExpiresAt: exp.UTC().Format(event.TimeFormat)})
	return nil
}
