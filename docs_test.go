package nqd_test

// The documentation's links: every relative link of the README and of docs/
// names a file of the repository, and every #fragment a heading of the page
// it points at, so that moving a section does not leave a reader at a dead
// end.

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	backticked = regexp.MustCompile("`([^`]*)`")
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading  = regexp.MustCompile(`^#{1,6}\s+(.*)$`)
	slugDelete = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// slug is the fragment GitHub gives a heading.
func slug(heading string) string {
	return strings.ReplaceAll(slugDelete.ReplaceAllString(strings.ToLower(strings.TrimSpace(heading)), ""), " ", "-")
}

// mdLines returns the lines of a Markdown file outside fenced code blocks.
func mdLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fenced := false
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}

func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	for _, line := range mdLines(t, path) {
		if m := mdHeading.FindStringSubmatch(strings.TrimRight(line, "\n")); m != nil {
			s := slug(m[1])
			for n := 1; seen[s]; n++ { // GitHub numbers repeated headings
				s = slug(m[1]) + "-" + string(rune('0'+n))
			}
			seen[s] = true
		}
	}
	return seen
}

func TestDocLinks(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages := append([]string{"README.md", "BENCHMARKS.md", "CHANGELOG.md"}, docs...)
	for _, page := range pages {
		for _, line := range mdLines(t, page) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, frag, _ := strings.Cut(target, "#")
				path := page
				if file != "" {
					path = filepath.Join(filepath.Dir(page), file)
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: the link %s names no file of the repository", page, target)
					continue
				}
				if frag != "" && strings.HasSuffix(path, ".md") && !anchors(t, path)[frag] {
					t.Errorf("%s: the link %s names no heading of %s", page, target, path)
				}
			}
		}
	}
}

// TestArchitectureImports: the package table of docs/architecture.md lists
// every package of the module, and a package and its tests import only
// packages listed at or below its own row, as `go list` reads the code.
func TestArchitectureImports(t *testing.T) {
	const module = "github.com/nqd-dev/nqd"
	row := map[string]int{} // package path: its row, from 1 at the top
	rows, inTable := 0, false
	for _, line := range mdLines(t, "docs/architecture.md") {
		switch {
		case strings.HasPrefix(line, "## "):
			inTable = strings.TrimSpace(line) == "## Packages"
		case inTable && strings.HasPrefix(line, "| `"):
			rows++
			first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " | ")
			for _, m := range backticked.FindAllStringSubmatch(first, -1) {
				if strings.HasSuffix(m[1], ".go") {
					continue
				}
				path := module + "/" + m[1]
				if m[1] == "nqd" {
					path = module
				}
				row[path] = rows
			}
		}
	}
	if len(row) == 0 {
		t.Fatal("docs/architecture.md has no package table under ## Packages")
	}
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		pkg := fields[0]
		if strings.Contains(pkg, "/node_modules/") {
			continue
		}
		r, ok := row[pkg]
		if !ok {
			t.Errorf("docs/architecture.md does not list the package %s", strings.TrimPrefix(pkg, module+"/"))
			continue
		}
		seen := map[string]bool{} // a test may import what the package does
		for _, imp := range fields[1:] {
			if imp != module && !strings.HasPrefix(imp, module+"/") || seen[imp] {
				continue
			}
			seen[imp] = true
			if ir, ok := row[imp]; ok && ir < r {
				t.Errorf("%s imports %s, which docs/architecture.md lists above it", pkg, imp)
			}
		}
	}
}
