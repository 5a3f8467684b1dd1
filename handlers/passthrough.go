package handlers

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"github.com/nqd-dev/nqd"
)

// nuxtIconPrefix is Nuxt Icon's own endpoint: it starts with /api/_ but is
// the Nuxt app's, never nqd's.
const nuxtIconPrefix = "/api/_nuxt_icon"

// passThrough serves api's paths (ownsPath) and forwards every other
// request, WebSocket upgrades included, to the Nuxt app at upstream, so that
// the v0.5 UI, which calls its API and opens its sockets on its own origin,
// works with nqd on one origin. Forwarded requests pass the Host allow-list
// too, and keep their Host, so that the app sees the name it was asked by.
func (a *API) passThrough(api http.Handler, upstream *url.URL) http.Handler {
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
			pr.Out.Host = pr.In.Host
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			a.log.Warn().Err(err).Str("upstream", upstream.Redacted()).Msg("the UI upstream did not answer")
			writeError(w, r, &nqd.Error{Code: nqd.CodeUnavailable,
				Message: "The UI app behind nqd (NQ_UI_UPSTREAM) did not answer; is it running?"})
		},
	}
	toUI := a.guard.checkHost(proxy)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.ownsPath(r.URL.Path) {
			api.ServeHTTP(w, r)
			return
		}
		toUI.ServeHTTP(w, r)
	})
}

// ownsPath reports whether nqd serves path in pass-through mode: its API
// (/api/ but Nuxt Icon's), its probes and metrics, and its dashboard when
// that has a path of its own.
func (a *API) ownsPath(path string) bool {
	switch {
	case path == "/healthz" || path == "/readyz" || path == "/metrics":
		return true
	case path == nuxtIconPrefix || strings.HasPrefix(path, nuxtIconPrefix+"/"):
		return false
	case path == "/api" || strings.HasPrefix(path, "/api/"):
		return true
	}
	base := strings.TrimSuffix(a.webBase, "/")
	return a.web != nil && base != "" && (path == base || strings.HasPrefix(path, base+"/"))
}
