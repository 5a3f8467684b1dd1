package handlers

import (
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/nqd-dev/nqd"
)

// guard holds the checks every request passes before it is routed: the
// Host a browser thinks it is talking to, the origin of a state-changing
// browser request, and the media type of a body.
type guard struct {
	hosts       []string // lower case; nil: any
	crossOrigin *http.CrossOriginProtection
}

// newGuard builds the checks. Without checkHost any Host passes; origins are
// trusted to make cross-origin requests, and "*" among them trusts every
// origin.
func newGuard(checkHost bool, hosts, origins []string) (guard, error) {
	g := guard{crossOrigin: http.NewCrossOriginProtection()}
	if checkHost {
		g.hosts = []string{}
		for _, h := range hosts {
			g.hosts = append(g.hosts, strings.ToLower(h))
		}
	}
	if slices.Contains(origins, "*") {
		g.crossOrigin = nil
		return g, nil
	}
	for _, o := range origins {
		if err := g.crossOrigin.AddTrustedOrigin(o); err != nil {
			return guard{}, err
		}
	}
	return g, nil
}

// checkHost refuses a Host header that names none of the allowed hosts. A
// page that rebinds its own DNS name to 127.0.0.1 reaches nqd with its name
// in Host, so a loopback nqd answers only to loopback names, IP addresses
// (which no rebinding can put there) and the names it was told.
func (g guard) checkHost(next http.Handler) http.Handler {
	if g.hosts == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.hostAllowed(r.Host) {
			writeError(w, r, &nqd.Error{Code: nqd.CodeHostNotAllowed,
				Message: "The Host header names a host this server does not serve; add it to NQ_ALLOWED_HOSTS."})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (g guard) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "" {
		return false
	}
	if net.ParseIP(host) != nil || host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	return slices.Contains(g.hosts, host)
}

// checkBrowser refuses what a web page on another origin could make a
// browser send: a state-changing request from a foreign origin (told by
// Sec-Fetch-Site or Origin), and a body in a media type other than JSON,
// the only one a form or a no-cors fetch cannot send. Requests with
// neither header (servers, workers, curl) pass, as do bodiless requests that
// name no media type.
func (g guard) checkBrowser(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.crossOrigin != nil {
			if err := g.crossOrigin.Check(r); err != nil {
				writeError(w, r, &nqd.Error{Code: nqd.CodeCrossOrigin,
					Message: "Cross-origin browser requests may not change anything; add the page's origin to NQ_CORS_ORIGINS to allow it."})
				return
			}
		}
		if changesState(r.Method) && !acceptedMedia(r) {
			writeError(w, r, &nqd.Error{Code: nqd.CodeUnsupportedMedia,
				Message: "The body must be JSON, sent as Content-Type: application/json."})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func changesState(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// acceptedMedia reports whether a state-changing request's Content-Type is
// JSON, or YAML on a PUT (flow definitions), or absent.
func acceptedMedia(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if ct == "" || ct == "application/json" {
		return true // the common case, without parsing
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return isJSONMedia(mt) || (r.Method == http.MethodPut && isYAMLMedia(mt))
}

func isJSONMedia(mt string) bool { return mt == "application/json" || strings.HasSuffix(mt, "+json") }

func isYAMLMedia(mt string) bool {
	return mt == "application/yaml" || mt == "application/x-yaml" || mt == "text/yaml"
}
