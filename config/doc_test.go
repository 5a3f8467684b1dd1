package config

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// configTableRow is a row of the configuration table in the docs: the
// variables, flags and default it names.
type configTableRow struct {
	file          string
	envs, flags   []string
	def           string
	literal, none bool // the default is a `value`, or (empty)
}

var backticked = regexp.MustCompile("`([^`]*)`")

// configDoc is the page whose table documents every setting.
const configDoc = "../docs/configuration.md"

// configTable reads the rows of the configuration table (| variable | flag
// | default | meaning |) from configDoc.
func configTable(t *testing.T) []configTableRow {
	t.Helper()
	var rows []configTableRow
	for _, f := range []string{configDoc} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(b)) {
			if !strings.HasPrefix(line, "| `NQ_") {
				continue
			}
			cells := strings.Split(line, " | ")
			if len(cells) < 4 {
				t.Errorf("%s: a configuration row with fewer than 4 cells: %s", f, line)
				continue
			}
			r := configTableRow{file: filepath.Base(f)}
			for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
				r.envs = append(r.envs, m[1])
			}
			for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
				r.flags = append(r.flags, strings.TrimPrefix(m[1], "-"))
			}
			if m := backticked.FindStringSubmatch(cells[2]); m != nil && m[0] == cells[2] {
				r.def, r.literal = m[1], true
			}
			r.none = cells[2] == "(empty)"
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		t.Fatal("no configuration table (rows starting | `NQ_) in " + configDoc)
	}
	return rows
}

// TestEverySettingDocumented: the configuration table names every setting
// of the table in Load, with its flag and default, and nothing else.
func TestEverySettingDocumented(t *testing.T) {
	rows := configTable(t)
	documented := map[string]configTableRow{}
	for _, r := range rows {
		for _, env := range r.envs {
			documented[env] = r
		}
	}
	known := map[string]bool{}
	for _, s := range settings(&Config{}) {
		known[s.env] = true
		r, ok := documented[s.env]
		if !ok {
			t.Errorf("%s (-%s) is not in the configuration table", s.env, s.flag)
			continue
		}
		switch {
		case s.flag == "" && len(r.flags) > 0:
			t.Errorf("%s: %s gives it the flag %v, but it is read from the environment only", s.env, r.file, r.flags)
		case s.flag != "" && !slices.Contains(r.flags, s.flag):
			t.Errorf("%s: %s names the flags %v, not -%s", s.env, r.file, r.flags, s.flag)
		}
		switch {
		case r.literal && r.def != s.def:
			t.Errorf("%s: %s says the default is %q, nqd's is %q", s.env, r.file, r.def, s.def)
		case r.none && s.def != "":
			t.Errorf("%s: %s says the default is empty, nqd's is %q", s.env, r.file, s.def)
		}
	}
	for env, r := range documented {
		if !known[env] {
			t.Errorf("%s: %s documents %s, which is no setting of nqd", r.file, env, env)
		}
	}
}
