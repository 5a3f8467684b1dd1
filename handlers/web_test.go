package handlers_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/go-chi/chi/v5"

	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/web"
)

var site = fstest.MapFS{
	"index.html":    {Data: []byte(`<html><base href="/"><script type="module" src="assets/app.js"></script></html>`)},
	"assets/app.js": {Data: []byte(`import "./lib.js";`)},
	"assets/lib.js": {Data: []byte(`export {};`)},
}

func webGet(t *testing.T, h http.Handler, path string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestWebServesIndexForPagesAndJSONForAPI(t *testing.T) {
	h := handlers.New(handlers.Deps{Web: site}).Routes()

	for _, path := range []string{"/", "/flows/diamond", "/runs/r1", "/no/such/page"} {
		rec := webGet(t, h, path)
		if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
			t.Fatalf("GET %s: %d %q, want the page", path, rec.Code, rec.Header().Get("Content-Type"))
		}
		if got := rec.Header().Get("Cache-Control"); got != "no-cache" {
			t.Errorf("GET %s: Cache-Control %q, want no-cache", path, got)
		}
		if !strings.Contains(rec.Body.String(), `<base href="/">`) {
			t.Errorf("GET %s: body %q lacks the base", path, rec.Body)
		}
	}
	for _, path := range []string{"/api", "/api/nope", "/api/_flows/x/nope/deeper"} {
		rec := webGet(t, h, path)
		if rec.Code != http.StatusNotFound || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
			t.Errorf("GET %s: %d %q, want a JSON 404", path, rec.Code, rec.Header().Get("Content-Type"))
		}
	}
	if rec := webGet(t, h, "/assets/missing.js"); rec.Code != http.StatusNotFound {
		t.Errorf("missing asset: %d, want 404", rec.Code)
	}
}

func TestWebAssetsCarryTheirHash(t *testing.T) {
	h := handlers.New(handlers.Deps{Web: site}).Routes()
	index := webGet(t, h, "/")
	m := regexp.MustCompile(`"assets/app\.js\?v=([0-9a-f]{16})"`).FindStringSubmatch(index.Body.String())
	if m == nil {
		t.Fatalf("index %q does not name app.js with its hash", index.Body)
	}
	hashed := webGet(t, h, "/assets/app.js?v="+m[1])
	if hashed.Code != http.StatusOK || hashed.Body.String() != `import "./lib.js";` {
		t.Fatalf("hashed asset: %d %q", hashed.Code, hashed.Body)
	}
	if got := hashed.Header().Get("Cache-Control"); !strings.Contains(got, "immutable") {
		t.Errorf("hashed asset: Cache-Control %q, want immutable", got)
	}
	if ct := hashed.Header().Get("Content-Type"); !strings.Contains(ct, "javascript") {
		t.Errorf("hashed asset: Content-Type %q", ct)
	}

	// A module imported by another comes without the hash: revalidated by ETag.
	plain := webGet(t, h, "/assets/lib.js")
	if got := plain.Header().Get("Cache-Control"); got != "no-cache" {
		t.Errorf("unhashed asset: Cache-Control %q, want no-cache", got)
	}
	etag := plain.Header().Get("ETag")
	if etag == "" {
		t.Fatal("unhashed asset has no ETag")
	}
	if rec := webGet(t, h, "/assets/lib.js", "If-None-Match", etag); rec.Code != http.StatusNotModified {
		t.Errorf("revalidation: %d, want 304", rec.Code)
	}
	if rec := webGet(t, h, "/assets/app.js?v=0000000000000000"); strings.Contains(rec.Header().Get("Cache-Control"), "immutable") {
		t.Error("an asset asked for with a stale hash is cached as immutable")
	}
}

func TestWebAtABasePath(t *testing.T) {
	h := handlers.New(handlers.Deps{Web: site, WebBase: "/ui/"}).Routes()
	if rec := webGet(t, h, "/ui"); rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d to %q, want a redirect to /ui/", rec.Code, rec.Header().Get("Location"))
	}
	for _, path := range []string{"/ui/", "/ui/runs/r1"} {
		rec := webGet(t, h, path)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `<base href="/ui/">`) {
			t.Errorf("GET %s: %d %q, want the page based at /ui/", path, rec.Code, rec.Body)
		}
	}
	if rec := webGet(t, h, "/ui/assets/lib.js"); rec.Code != http.StatusOK {
		t.Errorf("asset under the base: %d", rec.Code)
	}
	if rec := webGet(t, h, "/"); rec.Code != http.StatusNotFound {
		t.Errorf("GET / with the dashboard at /ui/: %d, want 404", rec.Code)
	}
}

// The embedded dashboard names only assets it has, and loads nothing from
// another origin: the page works with no internet.
func TestEmbeddedDashboardIsSelfContained(t *testing.T) {
	h := handlers.New(handlers.Deps{Web: web.FS}).Routes()
	index := webGet(t, h, "/").Body.String()
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(index, -1)
	if len(refs) < 3 {
		t.Fatalf("index names %d files: %q", len(refs), index)
	}
	for _, ref := range refs {
		u := ref[1]
		if strings.Contains(u, "//") {
			t.Errorf("index loads %s from another origin", u)
			continue
		}
		if u == "/" || u == "./" || !strings.HasPrefix(u, "assets/") {
			continue
		}
		if rec := webGet(t, h, "/"+u); rec.Code != http.StatusOK {
			t.Errorf("GET /%s: %d", u, rec.Code)
		}
	}
}

// openapi.yaml describes the API; the dashboard's files are not part of it,
// so TestRoutesDocumented builds its router without them. This keeps that
// honest: the dashboard adds exactly its two file routes and nothing else.
func TestWebAddsOnlyItsFileRoutes(t *testing.T) {
	routes := func(d handlers.Deps) map[string]bool {
		r, ok := handlers.New(d).Routes().(chi.Routes)
		if !ok {
			t.Fatal("Routes() is not a chi router")
		}
		out := map[string]bool{}
		err := chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
			out[method+" "+route] = true
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	with, without := routes(handlers.Deps{Web: site}), routes(handlers.Deps{})
	var added []string
	for r := range with {
		if !without[r] {
			added = append(added, r)
		}
	}
	slices.Sort(added)
	if want := []string{"GET /*", "GET /assets/*"}; !slices.Equal(added, want) {
		t.Errorf("the dashboard adds %v, want %v", added, want)
	}
}
