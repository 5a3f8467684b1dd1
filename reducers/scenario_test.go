package reducers_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/reducers"
)

var update = flag.Bool("update", false, "rewrite the expected output in testdata/*.txt")

// A scenario file is a list of blocks separated by blank lines, in the style
// of raft's interaction tests. A block is a command line, its input lines and,
// for commands that print, a `----` line followed by the expected output.
// Lines starting with # are comments.
//
//	type <context type> <context id>    choose the reducer (default flow)
//	limits logs=N emits=N names=N       reducer limits
//	events                              records in the wire form, one per line: <id> <json>
//	node                                Node module stream entries: <id> <json of string fields>
//	state [at=<id>]                     the state after the events up to id (default all)
//	diff from=<id> to=<id>              reducers.Diff between two positions
//
// An <id> is `<ms>-<seq>` or an RFC 3339 time, which takes the next sequence
// number within its millisecond.
type scenario struct {
	path    string
	blocks  []block
	ctxType string
	ctxID   string
	limits  reducers.Limits
	events  []event.Event
}

type block struct {
	lead   []string // comments and blank lines before the block
	cmd    string
	input  []string
	output []string
	prints bool
}

func TestScenarios(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			sc := loadScenario(t, path)
			changed := false
			for i := range sc.blocks {
				b := &sc.blocks[i]
				got := sc.run(t, b)
				if !b.prints {
					continue
				}
				if *update {
					changed = changed || strings.Join(b.output, "\n") != got
					b.output = strings.Split(got, "\n")
					continue
				}
				if diff := cmp.Diff(strings.Join(b.output, "\n"), got); diff != "" {
					t.Errorf("%s: %s (-want +got):\n%s", path, b.cmd, diff)
				}
			}
			if changed {
				sc.write(t)
			}
		})
	}
}

func loadScenario(t testing.TB, path string) *scenario {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc := &scenario{path: path, ctxType: "flow", ctxID: "run-1"}
	var lead []string
	var cur *block
	inOutput := false
	for line := range strings.SplitSeq(strings.TrimRight(string(raw), "\n"), "\n") {
		switch {
		case line == "":
			if cur != nil {
				sc.blocks = append(sc.blocks, *cur)
				cur, inOutput = nil, false
			}
			lead = append(lead, line)
		case cur == nil && strings.HasPrefix(line, "#"):
			lead = append(lead, line)
		case cur == nil:
			cur, lead = &block{lead: lead, cmd: line}, nil
		case line == "----":
			cur.prints, inOutput = true, true
		case inOutput:
			cur.output = append(cur.output, line)
		default:
			cur.input = append(cur.input, line)
		}
	}
	if cur != nil {
		sc.blocks = append(sc.blocks, *cur)
	}
	return sc
}

func (sc *scenario) write(t testing.TB) {
	t.Helper()
	var buf bytes.Buffer
	for _, b := range sc.blocks {
		for _, l := range b.lead {
			buf.WriteString(l + "\n")
		}
		buf.WriteString(b.cmd + "\n")
		for _, l := range b.input {
			buf.WriteString(l + "\n")
		}
		if b.prints {
			buf.WriteString("----\n")
			for _, l := range b.output {
				buf.WriteString(l + "\n")
			}
		}
	}
	if err := os.WriteFile(sc.path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (sc *scenario) reducer() reducers.Reducer {
	switch sc.ctxType {
	case "flow":
		return reducers.Flow{Limits: sc.limits}
	case "trigger":
		return reducers.Trigger{}
	case "registry":
		return reducers.Workers{}
	}
	return reducers.Generic{Limits: sc.limits}
}

// run executes one block and returns what it prints.
func (sc *scenario) run(t testing.TB, b *block) string {
	t.Helper()
	cmd, args := parseCmd(t, b.cmd)
	switch cmd {
	case "type":
		sc.ctxType, sc.ctxID = args["0"], args["1"]
	case "limits":
		sc.limits = reducers.Limits{Logs: atoi(t, args["logs"]), Emits: atoi(t, args["emits"]), Names: atoi(t, args["names"])}
	case "events", "node":
		for _, line := range b.input {
			if strings.HasPrefix(line, "#") {
				continue
			}
			sc.events = append(sc.events, sc.parseEvent(t, cmd, line))
		}
	case "state":
		return mustJSON(t, sc.foldTo(t, args["at"]))
	case "diff":
		d, err := reducers.Diff(sc.foldTo(t, args["from"]), sc.foldTo(t, args["to"]))
		if err != nil {
			t.Fatalf("%s: %v", b.cmd, err)
		}
		return mustJSON(t, d)
	default:
		t.Fatalf("%s: unknown command %q", sc.path, b.cmd)
	}
	return ""
}

func (sc *scenario) foldTo(t testing.TB, at string) reducers.State {
	t.Helper()
	through := event.MaxID
	if at != "" {
		through = parseAt(t, at)
	}
	var evs []event.Event
	for _, ev := range sc.events {
		if ev.ID.Compare(through) <= 0 {
			evs = append(evs, ev)
		}
	}
	s, err := reducers.Fold(sc.reducer(), evs)
	if err != nil {
		t.Fatalf("%s: fold: %v", sc.path, err)
	}
	if err := s.Validate(); err != nil {
		t.Fatalf("%s: state at %q invalid: %v", sc.path, at, err)
	}
	return s
}

func (sc *scenario) parseEvent(t testing.TB, cmd, line string) event.Event {
	t.Helper()
	idText, body, ok := strings.Cut(line, " ")
	if !ok {
		t.Fatalf("%s: event line %q: want <id> <json>", sc.path, line)
	}
	id := sc.nextID(t, idText)
	if cmd == "node" {
		var fields map[string]string
		if err := json.Unmarshal([]byte(body), &fields); err != nil {
			t.Fatalf("%s: %q: %v", sc.path, line, err)
		}
		ev, err := event.DecodeNodeFields(id, sc.ctxID, fields)
		if err != nil {
			t.Fatalf("%s: %q: %v", sc.path, line, err)
		}
		return ev
	}
	var ev event.Event
	if err := json.Unmarshal([]byte(body), &ev); err != nil {
		t.Fatalf("%s: %q: %v", sc.path, line, err)
	}
	ev.ID = id
	if ev.Subject == "" {
		ev.Subject = sc.ctxID
	}
	return ev
}

func (sc *scenario) nextID(t testing.TB, s string) event.ID {
	t.Helper()
	if !strings.Contains(s, "T") {
		id, err := event.ParseID(s)
		if err != nil {
			t.Fatalf("%s: id %q: %v", sc.path, s, err)
		}
		return id
	}
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("%s: time %q: %v", sc.path, s, err)
	}
	id := event.ID{MS: uint64(ts.UnixMilli())}
	if n := len(sc.events); n > 0 && sc.events[n-1].ID.MS == id.MS {
		id.Seq = sc.events[n-1].ID.Seq + 1
	}
	return id
}

func parseAt(t testing.TB, s string) event.ID {
	t.Helper()
	if strings.Contains(s, "T") {
		ts, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatalf("at=%q: %v", s, err)
		}
		return event.IDAt(ts)
	}
	id, err := event.ParseID(s)
	if err != nil {
		t.Fatalf("at=%q: %v", s, err)
	}
	return id
}

// parseCmd splits `name a b k=v` into the name and its arguments; positional
// ones are keyed by their index.
func parseCmd(t testing.TB, line string) (string, map[string]string) {
	t.Helper()
	parts := strings.Fields(line)
	args := map[string]string{}
	for i, p := range parts[1:] {
		if k, v, ok := strings.Cut(p, "="); ok {
			args[k] = v
		} else {
			args[strconv.Itoa(i)] = p
		}
	}
	return parts[0], args
}

func atoi(t testing.TB, s string) int {
	t.Helper()
	if s == "" {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return string(b)
}

// corpus is one scenario's reducer and events, for the tests that check
// invariants over every scenario.
type corpus struct {
	name string
	r    reducers.Reducer
	evs  []event.Event
}

func scenarioCorpora(t testing.TB) []corpus {
	t.Helper()
	paths, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	var out []corpus
	for _, path := range paths {
		sc := loadScenario(t, path)
		for i := range sc.blocks {
			switch cmd, _ := parseCmd(t, sc.blocks[i].cmd); cmd {
			case "type", "limits", "events", "node":
				sc.run(t, &sc.blocks[i])
			}
		}
		out = append(out, corpus{filepath.Base(path), sc.reducer(), sc.events})
	}
	return out
}
