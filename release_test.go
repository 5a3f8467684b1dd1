package nqd_test

// The release pieces read from the repository's files: cheap enough for
// every push, so that a version bump or a license that drifts apart fails
// here and not on the day of a tag. The build itself is make release-check.

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"testing"
)

// newestVersion is the first version heading of CHANGELOG.md, the version
// the next tag names.
func newestVersion(t *testing.T) string {
	t.Helper()
	changelog := readFile(t, "CHANGELOG.md")
	if !bytes.Contains(changelog, []byte("\n## [Unreleased]\n")) {
		t.Error("CHANGELOG.md has no ## [Unreleased] section")
	}
	m := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$`).FindSubmatch(changelog)
	if m == nil {
		t.Fatal("CHANGELOG.md has no version heading like ## [1.2.3] - 2006-01-02")
	}
	return string(m[1])
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReleaseLicenseCopiesMatch(t *testing.T) {
	license := readFile(t, "LICENSE")
	if !bytes.HasPrefix(license, []byte("MIT License\n")) {
		t.Fatal("LICENSE is not the MIT license")
	}
	// Each package is published from its own folder (the Go SDK module's zip,
	// npm pack, the Python sdist and wheel), which must carry the license.
	for _, copied := range []string{"sdk/go/LICENSE", "sdk/typescript/LICENSE", "sdk/nuxt/LICENSE", "sdk/python/LICENSE"} {
		if !bytes.Equal(readFile(t, copied), license) {
			t.Errorf("%s differs from LICENSE: cp LICENSE %s", copied, copied)
		}
	}
}

func TestReleaseNpmPackages(t *testing.T) {
	want := newestVersion(t)
	for _, dir := range []string{"sdk/typescript", "sdk/nuxt"} {
		var pkg struct {
			Version          string            `json:"version"`
			License          string            `json:"license"`
			Files            []string          `json:"files"`
			PeerDependencies map[string]string `json:"peerDependencies"`
		}
		if err := json.Unmarshal(readFile(t, dir+"/package.json"), &pkg); err != nil {
			t.Fatal(err)
		}
		if pkg.Version != want {
			t.Errorf("%s/package.json version is %q, CHANGELOG.md's newest is %q", dir, pkg.Version, want)
		}
		if pkg.License != "MIT" {
			t.Errorf("%s/package.json license is %q, want MIT", dir, pkg.License)
		}
		if !slices.Contains(pkg.Files, "LICENSE") {
			t.Errorf("%s/package.json files %q lack LICENSE", dir, pkg.Files)
		}
		// The module runs the SDK of its own release.
		if r, ok := pkg.PeerDependencies["nqd-worker"]; ok && r != "^"+want {
			t.Errorf("%s/package.json wants nqd-worker %q, not ^%s", dir, r, want)
		}
	}
}

func TestReleasePythonPackage(t *testing.T) {
	pyproject := readFile(t, "sdk/python/pyproject.toml")
	// The lines of the [project] table, read as the file writes them: a
	// TOML parser for two keys is not worth a dependency.
	project := regexp.MustCompile(`(?ms)^\[project\]\n(.*?)(?:^\[|\z)`).FindSubmatch(pyproject)
	if project == nil {
		t.Fatal("sdk/python/pyproject.toml has no [project] table")
	}
	version := ""
	if m := regexp.MustCompile(`(?m)^version = "([^"]*)"$`).FindSubmatch(project[1]); m != nil {
		version = string(m[1])
	}
	if want := newestVersion(t); version != want {
		t.Errorf("sdk/python/pyproject.toml's project version is %q, CHANGELOG.md's newest is %q", version, want)
	}
	if !regexp.MustCompile(`(?m)^license = \{text = "MIT"\}$`).Match(project[1]) {
		t.Error(`sdk/python/pyproject.toml's project lacks license = {text = "MIT"}`)
	}
}

func TestReleaseScriptIsExecutable(t *testing.T) {
	info, err := os.Stat("scripts/release.sh")
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm()&0o111 == 0 {
		t.Errorf("scripts/release.sh is %v, not executable: make release runs it", info.Mode().Perm())
	}
}
