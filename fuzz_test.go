package nqd_test

// make fuzz runs every fuzz target of the repository, so that a target
// moved to another package or newly written is not left out of it.

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var fuzzFunc = regexp.MustCompile(`(?m)^func (Fuzz\w+)\(`)

func TestMakeFuzzRunsEveryTarget(t *testing.T) {
	makefile, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range fuzzFunc.FindAllSubmatch(src, -1) {
			found++
			want := "-fuzz=" + string(m[1]) + " -fuzztime=30s ./" + filepath.ToSlash(filepath.Dir(path)) + "\n"
			if !strings.Contains(string(makefile), want) {
				t.Errorf("%s: %s is not run by make fuzz (want a line ending %q)", path, m[1], want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no fuzz targets found")
	}
}
