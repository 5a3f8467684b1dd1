package flows

// Node is one step of a diagram.
type Node struct {
	ID            string   `json:"id"`
	Type          string   `json:"type"` // step or await-step
	Queue         string   `json:"queue"`
	Entry         bool     `json:"entry,omitempty"`
	Await         *Await   `json:"await,omitempty"`
	Emits         []string `json:"emits"`
	Subscriptions []string `json:"subscriptions"`
}

// Edge links an emitting step to a subscriber (type emit), or an awaiting
// step to itself (type await).
type Edge struct {
	From    string `json:"from"`
	To      string `json:"to"`
	Label   string `json:"label"`
	Type    string `json:"type"`
	Timeout int64  `json:"timeout,omitempty"`
}

// Diagram is a flow's graph as the UIs draw it (FlowDiagram in openapi.yaml):
// a node per step, an edge per emit from a step to each subscriber, and a
// self-edge per await.
type Diagram struct {
	Nodes []Node `json:"nodes"`
	Edges []Edge `json:"edges"`
}

// Diagram builds the nodes and edges of d, in a stable order.
func (d *Definition) Diagram() Diagram {
	g := Diagram{Nodes: []Node{}, Edges: []Edge{}}
	for _, name := range d.StepNames() {
		s := d.Steps[name]
		n := Node{
			ID: name, Type: "step", Queue: s.Queue, Entry: name == d.Entry, Await: s.Await,
			Emits: nonNil(s.Emits), Subscriptions: nonNil(s.Subscribes),
		}
		if s.Await != nil {
			n.Type = "await-step"
		}
		g.Nodes = append(g.Nodes, n)
	}
	for _, name := range d.StepNames() {
		s := d.Steps[name]
		for _, ev := range s.Emits {
			for _, sub := range d.Subscribers(ev) {
				g.Edges = append(g.Edges, Edge{From: name, To: sub, Label: ev, Type: "emit"})
			}
		}
		if a := s.Await; a != nil {
			label := "⏱ " + a.Type
			if a.EventKind != "" {
				label = "⏱ " + a.EventKind
			}
			g.Edges = append(g.Edges, Edge{From: name, To: name, Label: label, Type: "await", Timeout: a.Timeout})
		}
	}
	return g
}

// ListedStep is a step in the listing the v0.3 UI reads
// (docs/compatibility.md) plus emits and await.
type ListedStep struct {
	Step       string   `json:"step,omitempty"` // only on the entry
	Queue      string   `json:"queue"`
	WorkerID   string   `json:"workerId"`
	Subscribes []string `json:"subscribes,omitempty"`
	Emits      []string `json:"emits,omitempty"`
	Await      *Await   `json:"await,omitempty"`
}

// Listed is one flow of `GET /api/_flows`: the v0.3 UI's `{id, entry, steps}`
// where steps leaves out the entry, plus the diagram, and the graph as the
// v0.5 UI reads it (`analyzed`).
type Listed struct {
	ID       string                `json:"id"`
	Entry    ListedStep            `json:"entry"`
	Steps    map[string]ListedStep `json:"steps"`
	Diagram  Diagram               `json:"diagram"`
	Analyzed Analyzed              `json:"analyzed"`
}

// Listing is d in the v0.3 UI's shape.
func (d *Definition) Listing() Listed {
	l := Listed{ID: d.Name, Steps: map[string]ListedStep{}, Diagram: d.Diagram(), Analyzed: d.Analyze()}
	for name, s := range d.Steps {
		ls := ListedStep{
			Queue: s.Queue, WorkerID: s.WorkerID, Subscribes: sortedCopy(s.Subscribes),
			Emits: s.Emits, Await: s.Await,
		}
		if ls.WorkerID == "" {
			ls.WorkerID = d.Name + "/" + name
		}
		if name == d.Entry {
			ls.Step = name
			l.Entry = ls
			continue
		}
		l.Steps[name] = ls
	}
	return l
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
