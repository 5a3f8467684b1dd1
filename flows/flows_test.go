package flows_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nqd-dev/nqd/flows"
)

func TestLoadDir(t *testing.T) {
	defs, err := flows.LoadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*flows.Definition{}
	for _, d := range defs {
		got[d.Name] = d
	}
	ex, ok := got["example-flow"]
	if !ok {
		t.Fatalf("loaded %v, want example-flow", got)
	}
	if p := ex.Steps["fetch_data"].RetryPolicy; p == nil || p.Attempts != 3 || p.Backoff.Type != "exponential" {
		t.Errorf("fetch_data retry policy = %+v", p)
	}
	if d := got["diamond"]; d == nil || d.Entry != "start" || len(d.Steps) != 4 {
		t.Errorf("diamond = %+v", d)
	}
}

func TestLoadDirRejectsBadFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("entry: a\nsteps:\n  a: {queue: q, retries: 3}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := flows.LoadDir(dir); err == nil {
		t.Fatal("unknown field accepted")
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		json string
		want map[string]string // field -> any message; nil means valid
	}{
		{"valid", `{"entry":"a","steps":{"a":{"queue":"q","emits":["x"]},"b":{"queue":"q","subscribes":["x"]}}}`, nil},
		{"unknown subscription", `{"entry":"a","steps":{"a":{"queue":"q","emits":["x"]},"b":{"queue":"q","subscribes":["x","y"]}}}`,
			map[string]string{"steps.b.subscribes[1]": `no step emits "y"`}},
		{"cycle", `{"entry":"a","steps":{"a":{"queue":"q","emits":["x"]},"b":{"queue":"q","subscribes":["x","z"],"emits":["y"]},"c":{"queue":"q","subscribes":["y"],"emits":["z"]}}}`,
			map[string]string{"steps.b.subscribes": `forms a cycle through step "c"`}},
		{"unreachable", `{"entry":"a","steps":{"a":{"queue":"q"},"b":{"queue":"q"}}}`,
			map[string]string{"steps.b": "unreachable from the entry step"}},
		{"missing entry", `{"entry":"zz","steps":{"a":{"queue":"q"}}}`, map[string]string{"entry": "names no step"}},
		{"bad backoff", `{"entry":"a","steps":{"a":{"queue":"q","retryPolicy":{"attempts":0,"backoff":{"type":"linear","delayMs":1}}}}}`,
			map[string]string{"steps.a.retryPolicy.attempts": "must be 1 to 100", "steps.a.retryPolicy.backoff.type": "must be fixed or exponential"}},
		{"missing queue", `{"entry":"a","steps":{"a":{}}}`, map[string]string{"steps.a.queue": "required, must match ^[A-Za-z0-9][A-Za-z0-9._~-]{0,127}$"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := flows.Parse([]byte(tt.json), false, "f")
			if tt.want == nil {
				if err != nil {
					t.Fatalf("got %v, want valid", err)
				}
				return
			}
			var ve *flows.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("got %v, want a ValidationError", err)
			}
			if diff := cmp.Diff(tt.want, ve.Fields); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDiagram(t *testing.T) {
	defs, err := flows.LoadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		if d.Name != "example-flow" {
			continue
		}
		g := d.Diagram()
		want := []flows.Edge{
			{From: "fetch_data", To: "process_data", Label: "fetch_data.completed", Type: "emit"},
			{From: "await_approval", To: "await_approval", Label: "⏱ trigger", Type: "await", Timeout: 86400000},
			{From: "process_data", To: "await_approval", Label: "process_data.completed", Type: "emit"},
		}
		if diff := cmp.Diff(want, g.Edges); diff != "" {
			t.Errorf("edges (-want +got):\n%s", diff)
		}
		if g.Nodes[0].ID != "fetch_data" || !g.Nodes[0].Entry {
			t.Errorf("first node = %+v, want the entry", g.Nodes[0])
		}
		l := d.Listing()
		b, _ := json.Marshal(l)
		if l.Entry.Step != "fetch_data" || l.Entry.Queue != "default" || len(l.Steps) != 2 {
			t.Errorf("listing = %s", b)
		}
	}
}

func TestRetryDelay(t *testing.T) {
	p := &flows.RetryPolicy{Attempts: 5, Backoff: flows.Backoff{Type: "exponential", DelayMs: 100, MaxDelayMs: 350}}
	var got []time.Duration
	for n := 1; n <= 4; n++ {
		got = append(got, p.Delay(n))
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 350 * time.Millisecond, 350 * time.Millisecond}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("delays (-want +got):\n%s", diff)
	}
	if (&flows.RetryPolicy{Attempts: 2, Backoff: flows.Backoff{Type: "fixed", DelayMs: 7}}).Delay(3) != 7*time.Millisecond {
		t.Error("fixed backoff grew")
	}
}

// A flow may not take a name nqd keeps its own records under.
func TestValidateReservedName(t *testing.T) {
	_, err := flows.Parse([]byte(`{"entry":"a","steps":{"a":{"queue":"q"}}}`), false, flows.ReservedPrefix+"trigger")
	var ve *flows.ValidationError
	if !errors.As(err, &ve) || ve.Fields["name"] == "" {
		t.Fatalf("got %v, want a ValidationError naming name", err)
	}
}
