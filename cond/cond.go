// Package cond compiles and evaluates the conditions of event awaits: CEL
// expressions (github.com/google/cel-go) over two variables, `event` (the
// candidate event as the JSON object nqd sends, Event in openapi.yaml) and
// `input` (the run's input). A condition is compiled when its definition is
// stored, so a bad one is refused up front instead of failing the run that
// reaches it.
package cond

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/cel-go/cel"
)

// CostLimit bounds one evaluation's work, so a condition cannot stall the
// engine on a large event (CEL's cost units: roughly one per operation and
// per list element visited).
const CostLimit = 100_000

// MaxLen is the longest condition accepted, in bytes.
const MaxLen = 4096

// ErrInvalid marks a condition that does not compile or does not yield a
// bool.
var ErrInvalid = errors.New("cond: invalid condition")

var env = func() *cel.Env {
	e, err := cel.NewEnv(
		cel.Variable("event", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("input", cel.DynType),
	)
	if err != nil {
		panic(err) // the declarations above are fixed
	}
	return e
}()

// Program is a compiled condition. It is safe for concurrent use.
type Program struct {
	src string
	prg cel.Program
}

// Compile checks expr and returns its program. Errors wrap ErrInvalid with
// CEL's message.
func Compile(expr string) (*Program, error) {
	if len(expr) > MaxLen {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrInvalid, MaxLen)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, iss.Err())
	}
	// A dyn result is accepted: `event.data.ok` is a bool only at run
	// time; Match treats a non-bool result as no match.
	if t := ast.OutputType(); t != cel.BoolType && t != cel.DynType {
		return nil, fmt.Errorf("%w: yields %s, not bool", ErrInvalid, t)
	}
	prg, err := env.Program(ast, cel.CostLimit(CostLimit))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return &Program{src: expr, prg: prg}, nil
}

// String returns the condition's source.
func (p *Program) String() string { return p.src }

// Match evaluates the condition for ev (an event's JSON object) and input (a
// JSON value; empty means null). An error (a missing field, a type mismatch,
// the cost limit) or a non-bool result is no match, reported so the caller
// can log it.
func (p *Program) Match(ev, input json.RawMessage) (bool, error) {
	var e map[string]any
	if err := json.Unmarshal(ev, &e); err != nil {
		return false, fmt.Errorf("cond: event: %w", err)
	}
	var in any
	if len(input) > 0 {
		if err := json.Unmarshal(input, &in); err != nil {
			return false, fmt.Errorf("cond: input: %w", err)
		}
	}
	out, _, err := p.prg.Eval(map[string]any{"event": e, "input": in})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("cond: %q yields %T, not bool", p.src, out.Value())
	}
	return b, nil
}
