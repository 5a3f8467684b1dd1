package handlers

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
)

// webSite is the dashboard as served: its files read once at start, each
// with a content hash, and index.html rewritten to carry the base path and
// hashed asset URLs. The files are embedded, so reading them once costs a
// few hundred kilobytes and saves a filesystem walk per request.
type webSite struct {
	base      string // "" or a path like "/ui", never ending in "/"
	index     []byte
	indexETag string
	assets    map[string]webAsset // by path below assets/, e.g. "app.js"
}

type webAsset struct {
	data []byte
	hash string // hex, 16 digits: enough to tell versions apart
}

// webBase cleans a configured base path to "" (the root) or "/x/y".
func webBase(base string) string {
	base = strings.Trim(base, "/")
	if base == "" {
		return ""
	}
	return path.Clean("/" + base)
}

func newWebSite(fsys fs.FS, base string) (*webSite, error) {
	s := &webSite{base: webBase(base), assets: map[string]webAsset{}}
	err := fs.WalkDir(fsys, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		s.assets[strings.TrimPrefix(p, "assets/")] = webAsset{data: data, hash: hex.EncodeToString(sum[:8])}
		return nil
	})
	if err != nil {
		return nil, err
	}
	index, err := fs.ReadFile(fsys, "index.html")
	if err != nil {
		return nil, err
	}
	// index.html names its assets with relative URLs under <base href>, so
	// the same file works at any base path; the query carries the hash that
	// lets a browser keep the asset for a year.
	index = bytes.Replace(index, []byte(`<base href="/">`), []byte(`<base href="`+s.base+`/">`), 1)
	for name, a := range s.assets {
		index = bytes.ReplaceAll(index, []byte(`"assets/`+name+`"`), []byte(`"assets/`+name+`?v=`+a.hash+`"`))
	}
	sum := sha256.Sum256(index)
	s.index, s.indexETag = index, `"`+hex.EncodeToString(sum[:8])+`"`
	return s, nil
}

// dashboard is the dashboard's site, or nil when there is none: no files,
// unreadable files, or a UI upstream that takes every path the dashboard
// has not one of its own for.
func (a *API) dashboard() *webSite {
	if a.web == nil || (a.upstream != nil && strings.Trim(a.webBase, "/") == "") {
		return nil
	}
	s, err := newWebSite(a.web, a.webBase)
	if err != nil {
		a.log.Error().Err(err).Msg("the dashboard's files are unreadable: the dashboard is off")
		return nil
	}
	return s
}

// redirectToBase sends the base path without its slash to the base.
func (s *webSite) redirectToBase(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, s.base+"/", http.StatusMovedPermanently)
}

func (s *webSite) serveIndex(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.Path; p == "/api" || strings.HasPrefix(p, "/api/") {
		notFound(w, r)
		return
	}
	h := w.Header()
	s.secure(h)
	// no-cache revalidates every load, so a new release shows at once; the
	// ETag makes that revalidation a 304.
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", s.indexETag)
	http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(s.index))
}

func (s *webSite) serveAsset(w http.ResponseWriter, r *http.Request) {
	asset, ok := s.assets[chi.URLParam(r, "*")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	s.secure(h)
	h.Set("ETag", `"`+asset.hash+`"`)
	if v := r.URL.Query().Get("v"); v == asset.hash {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		// Modules imported by other modules come without the hash.
		h.Set("Cache-Control", "no-cache")
	}
	http.ServeContent(w, r, chi.URLParam(r, "*"), time.Time{}, bytes.NewReader(asset.data))
}

// secure sets the headers that keep the page to its own origin: it loads
// nothing from elsewhere, so it works with no internet and cannot be framed.
func (s *webSite) secure(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'")
}
