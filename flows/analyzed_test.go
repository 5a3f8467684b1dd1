package flows_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/flows"
)

func TestAnalyzeDiamondWithAwait(t *testing.T) {
	d := &flows.Definition{Name: "diamond", Entry: "start", Steps: map[string]flows.Step{
		"start": {Queue: "q", Emits: []string{"a.go", "b.go"}},
		"a":     {Queue: "q", Subscribes: []string{"a.go"}, Emits: []string{"a.done"}},
		"b": {Queue: "q", Subscribes: []string{"b.go"}, Emits: []string{"b.done"}, Timeout: 60_000,
			Await: &flows.Await{Type: "trigger", Timeout: 3_600_000}},
		"final": {Queue: "q", Subscribes: []string{"a.done", "b.done"}},
	}}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	a := d.Analyze()
	if diff := cmp.Diff([][]string{{"start"}, {"a", "b"}, {"final"}}, a.Levels); diff != "" {
		t.Errorf("levels (-want +got):\n%s", diff)
	}
	if a.MaxLevel != 2 {
		t.Errorf("maxLevel = %d, want 2", a.MaxLevel)
	}
	final := a.Steps["final"]
	if diff := cmp.Diff([]string{"a", "b"}, final.DependsOn); diff != "" {
		t.Errorf("final depends on (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a", "b"}, a.Steps["start"].Triggers); diff != "" {
		t.Errorf("start triggers (-want +got):\n%s", diff)
	}
	b := a.Steps["b"]
	if !b.HasAwaitPattern || b.AwaitBefore == nil || b.AwaitBefore.Type != "webhook" || b.AwaitBefore.Timeout != 3_600_000 {
		t.Errorf("b = %+v, want a webhook await of an hour", b)
	}
	if a.Steps["a"].StepTimeout != 300_000 || b.StepTimeout != 60_000 || b.WorkerID != "diamond/b" {
		t.Errorf("a = %+v, b = %+v", a.Steps["a"], b)
	}
	// Levels take 5 min, max(5 min, 1 min + 1 h) and 5 min; the margin is a tenth.
	var levels int64 = 300_000 + 3_660_000 + 300_000
	if want := levels + levels/10; a.StallTimeout != want {
		t.Errorf("stallTimeout = %d, want %d", a.StallTimeout, want)
	}
	if p := a.AwaitPatterns; p == nil || p.BeforeCount != 1 || p.TotalTimeout != 3_600_000 || p.Steps[0] != "b" {
		t.Errorf("awaitPatterns = %+v", p)
	}
}

func TestAnalyzeWithoutAwaits(t *testing.T) {
	d := &flows.Definition{Name: "one", Entry: "only", Steps: map[string]flows.Step{"only": {Queue: "q"}}}
	a := d.Analyze()
	if a.AwaitPatterns != nil || a.MaxLevel != 0 || len(a.Levels) != 1 {
		t.Errorf("analyzed = %+v", a)
	}
	// One level of five minutes gets the least margin, five minutes.
	if a.StallTimeout != 600_000 {
		t.Errorf("stallTimeout = %d, want 600000", a.StallTimeout)
	}
}
