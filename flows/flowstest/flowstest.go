// Package flowstest stores flow definitions for tests.
package flowstest

import (
	"context"
	"testing"

	"github.com/nqd-dev/nqd/flows"
)

// Definer stores flow definitions, as the engine does.
type Definer interface {
	PutDefinition(ctx context.Context, d *flows.Definition) error
}

// Define stores every flow definition of dir with e, and returns them.
func Define(t testing.TB, e Definer, dir string) []*flows.Definition {
	t.Helper()
	defs, err := flows.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		if err := e.PutDefinition(t.Context(), d); err != nil {
			t.Fatal(err)
		}
	}
	return defs
}
