package flows

import (
	"slices"
)

// The stall budget the v0.5 UI shows for a flow: what a step may take when
// it sets no timeout, the least margin added, and the budget of a flow that
// waits for nothing.
const (
	analyzedStepTimeout  = 5 * 60 * 1000
	analyzedMinMargin    = 5 * 60 * 1000
	analyzedDefaultStall = 30 * 60 * 1000
)

// AnalyzedStep is a step as the v0.5 UI draws it: its place in the graph
// (what it waits for, what it starts, its level) besides its settings.
type AnalyzedStep struct {
	Name            string       `json:"name"`
	Queue           string       `json:"queue"`
	WorkerID        string       `json:"workerId"`
	Subscribes      []string     `json:"subscribes,omitempty"`
	Emits           []string     `json:"emits,omitempty"`
	StepTimeout     int64        `json:"stepTimeout"`
	AwaitBefore     *AwaitBefore `json:"awaitBefore,omitempty"`
	DependsOn       []string     `json:"dependsOn"`
	Triggers        []string     `json:"triggers"`
	Level           int          `json:"level"`
	HasAwaitPattern bool         `json:"hasAwaitPattern"`
	Runtime         string       `json:"runtime"`
}

// AwaitBefore is a step's await in the v0.5 shape: nqd's trigger awaits are
// its webhooks, and the step runs once the wait ends.
type AwaitBefore struct {
	Type    string `json:"type"` // time, event or webhook
	Delay   int64  `json:"delay,omitempty"`
	Event   string `json:"event,omitempty"`
	Timeout int64  `json:"timeout,omitempty"`
}

// AwaitPatterns sums up a flow's awaits.
type AwaitPatterns struct {
	Steps        []string `json:"steps"`
	BeforeCount  int      `json:"beforeCount"`
	AfterCount   int      `json:"afterCount"`
	TotalTimeout int64    `json:"totalTimeout"`
}

// Analyzed is the v0.5 UI's view of a flow's graph: every step (the entry
// included) with its dependencies and level, the steps grouped by level,
// and the time after which a run that has not moved counts as stalled.
type Analyzed struct {
	Steps         map[string]AnalyzedStep `json:"steps"`
	Levels        [][]string              `json:"levels"`
	MaxLevel      int                     `json:"maxLevel"`
	StallTimeout  int64                   `json:"stallTimeout"`
	AwaitPatterns *AwaitPatterns          `json:"awaitPatterns,omitempty"`
}

// Analyze builds d's analyzed view. The entry is level 0; any other step
// sits one level below the deepest step it depends on, and a step that
// depends on none sits at level 1. Validate refuses cycles, so every level
// is well defined; a cycle that slipped through counts as no dependency.
func (d *Definition) Analyze() Analyzed {
	names := d.StepNames()
	deps := map[string][]string{}
	for _, name := range names {
		for _, next := range d.next(name) {
			if !slices.Contains(deps[next], name) {
				deps[next] = append(deps[next], name)
			}
		}
	}

	level := map[string]int{}
	visiting := map[string]bool{}
	var visit func(string) int
	visit = func(name string) int {
		if l, ok := level[name]; ok {
			return l
		}
		if name == d.Entry {
			level[name] = 0
			return 0
		}
		if visiting[name] {
			return 0
		}
		visiting[name] = true
		l := 1
		for _, dep := range deps[name] {
			l = max(l, visit(dep)+1)
		}
		visiting[name] = false
		level[name] = l
		return l
	}

	a := Analyzed{Steps: map[string]AnalyzedStep{}}
	for _, name := range names {
		a.MaxLevel = max(a.MaxLevel, visit(name))
	}
	a.Levels = make([][]string, a.MaxLevel+1)
	for i := range a.Levels {
		a.Levels[i] = []string{}
	}
	for _, name := range names {
		s := d.Steps[name]
		as := AnalyzedStep{
			Name: name, Queue: s.Queue, WorkerID: s.WorkerID,
			Subscribes: s.Subscribes, Emits: s.Emits,
			StepTimeout: s.Timeout, DependsOn: nonNil(deps[name]), Triggers: nonNil(d.next(name)),
			Level: level[name], Runtime: "nodejs",
		}
		if as.WorkerID == "" {
			as.WorkerID = d.Name + "/" + name
		}
		if as.StepTimeout == 0 {
			as.StepTimeout = analyzedStepTimeout
		}
		if w := s.Await; w != nil {
			as.HasAwaitPattern = true
			as.AwaitBefore = &AwaitBefore{Type: w.Type, Delay: w.Delay, Event: w.EventKind, Timeout: w.Timeout}
			if w.Type == "trigger" {
				as.AwaitBefore.Type = "webhook"
			}
		}
		a.Steps[name] = as
		a.Levels[as.Level] = append(a.Levels[as.Level], name)
	}
	a.StallTimeout = a.stallTimeout()
	a.AwaitPatterns = a.awaitPatterns()
	return a
}

// stallTimeout adds up, level by level, the longest a step of the level
// may take (its timeout and its await's), with a margin of a tenth (five
// minutes at least); a flow without steps gets the default.
func (a *Analyzed) stallTimeout() int64 {
	var total int64
	for _, names := range a.Levels {
		var longest int64
		for _, name := range names {
			s := a.Steps[name]
			t := s.StepTimeout
			if s.AwaitBefore != nil {
				t += max(s.AwaitBefore.Timeout, s.AwaitBefore.Delay)
			}
			longest = max(longest, t)
		}
		total += longest
	}
	if total == 0 {
		return analyzedDefaultStall
	}
	return total + max(total/10, analyzedMinMargin)
}

func (a *Analyzed) awaitPatterns() *AwaitPatterns {
	var p AwaitPatterns
	for _, names := range a.Levels {
		for _, name := range names {
			if w := a.Steps[name].AwaitBefore; w != nil {
				p.Steps = append(p.Steps, name)
				p.BeforeCount++
				p.TotalTimeout += w.Timeout
			}
		}
	}
	if len(p.Steps) == 0 {
		return nil
	}
	return &p
}
