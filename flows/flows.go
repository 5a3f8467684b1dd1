// Package flows holds flow definitions: their types, loading from JSON or
// YAML files, the checks that reject a definition the engine could not run
// (unknown subscriptions, cycles, unreachable steps), the diagram the UIs draw
// and the listing shape of `GET /api/_flows` that the v0.3 UI reads.
package flows

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/cond"
	"github.com/nqd-dev/nqd/event"
)

// Definition is one flow: an entry step and the steps that subscribe to the
// events steps emit.
type Definition struct {
	Name  string          `json:"name"`
	Entry string          `json:"entry"`
	Steps map[string]Step `json:"steps"`
	// StateSchema is an optional JSON Schema the values of state.* events
	// must satisfy; writes that break it are refused (see
	// examples/flows/ml-training.yaml).
	StateSchema json.RawMessage `json:"stateSchema,omitempty"`
}

// Step is one unit of work, run by a worker that claims it from Queue.
type Step struct {
	Queue string `json:"queue"`
	// WorkerID names the worker code, for the UI only.
	WorkerID    string       `json:"workerId,omitempty"`
	Subscribes  []string     `json:"subscribes,omitempty"`
	Emits       []string     `json:"emits,omitempty"`
	RetryPolicy *RetryPolicy `json:"retryPolicy,omitempty"`
	Await       *Await       `json:"await,omitempty"`
	// Timeout bounds one attempt in milliseconds; 0 takes the engine's lease.
	Timeout int64 `json:"timeout,omitempty"`
}

// RetryPolicy says how often a failed step is tried again and how long the
// engine waits in between.
type RetryPolicy struct {
	// Attempts counts every try, the first included; 1 means no retry.
	Attempts int     `json:"attempts"`
	Backoff  Backoff `json:"backoff"`
	// RetriableErrors, when set, limits retries to failures whose error
	// text equals one of them; a failure reported non-retriable never
	// retries.
	RetriableErrors []string `json:"retriableErrors,omitempty"`
}

// Backoff is the wait before a retry.
type Backoff struct {
	Type       string `json:"type"` // fixed or exponential
	DelayMs    int64  `json:"delayMs"`
	MaxDelayMs int64  `json:"maxDelayMs,omitempty"`
}

// Backoff types.
const (
	BackoffFixed       = "fixed"
	BackoffExponential = "exponential"
)

// Delay is the wait before the attempt after failed attempt n (1-based).
func (p *RetryPolicy) Delay(n int) time.Duration {
	if p == nil {
		return 0
	}
	d := p.Backoff.DelayMs
	if p.Backoff.Type == BackoffExponential {
		for i := 1; i < n && d < 1<<40; i++ {
			d *= 2
		}
	}
	if p.Backoff.MaxDelayMs > 0 && d > p.Backoff.MaxDelayMs {
		d = p.Backoff.MaxDelayMs
	}
	return time.Duration(d) * time.Millisecond
}

// MaxAttempts is the number of tries the policy allows; 1 without a policy.
func (p *RetryPolicy) MaxAttempts() int {
	if p == nil || p.Attempts < 1 {
		return 1
	}
	return p.Attempts
}

// Retriable reports whether a failure with text msg may be retried.
func (p *RetryPolicy) Retriable(msg string) bool {
	if p == nil {
		return false
	}
	return len(p.RetriableErrors) == 0 || slices.Contains(p.RetriableErrors, msg)
}

// Await declares that a step waits before it runs (a time, an event or a
// trigger; await_approval in examples/flows/example-flow.yaml): when the
// step is due the engine registers the await instead of queueing the step,
// and queues it once the await resolves, with the resolution in its input.
type Await struct {
	Type        string `json:"type"` // time, event or trigger
	EventKind   string `json:"eventKind,omitempty"`
	TriggerType string `json:"triggerType,omitempty"`
	// Delay is a time await's wait in milliseconds.
	Delay int64 `json:"delay,omitempty"`
	// Timeout bounds the wait in milliseconds; 0 waits until the engine's
	// longest trigger life for triggers and forever for events.
	Timeout int64 `json:"timeout,omitempty"`
	// OnTimeout names the step that runs when the await times out; without
	// it a timeout fails the step and the run.
	OnTimeout string `json:"onTimeout,omitempty"`
	// Where is an event await's condition in CEL over `event` and `input`,
	// e.g. `event.data.orderId == input.orderId`.
	Where string `json:"where,omitempty"`
	// Schema is an optional JSON Schema a trigger's payload must satisfy.
	Schema json.RawMessage `json:"schema,omitempty"`
}

// ValidationError lists the fields of a definition that break a rule, keyed
// by their JSON path (e.g. `steps.final.subscribes[1]`).
type ValidationError struct {
	Fields map[string]string
}

// Unwrap makes a ValidationError an error whose fields reach the client.
func (e *ValidationError) Unwrap() error {
	return &nqd.Error{Code: nqd.CodeUnprocessable, Message: "The flow definition is invalid.", Fields: e.Fields}
}

func (e *ValidationError) Error() string {
	keys := slices.Sorted(maps.Keys(e.Fields))
	var b bytes.Buffer
	b.WriteString("invalid flow definition:")
	for _, k := range keys {
		fmt.Fprintf(&b, " %s: %s;", k, e.Fields[k])
	}
	return b.String()
}

// StepNames lists the steps in a stable order: the entry first, then by name.
func (d *Definition) StepNames() []string {
	names := slices.Sorted(maps.Keys(d.Steps))
	if i := slices.Index(names, d.Entry); i > 0 {
		names = slices.Delete(names, i, i+1)
		names = slices.Insert(names, 0, d.Entry)
	}
	return names
}

// Subscribers lists, by name, the steps that subscribe to event ev.
func (d *Definition) Subscribers(ev string) []string {
	var out []string
	for _, name := range d.StepNames() {
		if slices.Contains(d.Steps[name].Subscribes, ev) {
			out = append(out, name)
		}
	}
	return out
}

// ReservedPrefix starts the names nqd keeps its own records under in the run
// store (schedules), so no flow may take one.
const ReservedPrefix = "nqd~"

// Validate checks d and returns a *ValidationError naming every offending
// field, or nil.
func (d *Definition) Validate() error {
	bad := map[string]string{}
	if !event.ValidName(d.Name) {
		bad["name"] = event.NameRule
	} else if strings.HasPrefix(d.Name, ReservedPrefix) {
		bad["name"] = "must not start with " + ReservedPrefix + ", which names nqd's own records"
	}
	if len(d.Steps) == 0 {
		bad["steps"] = "required"
	}
	if d.Entry == "" {
		bad["entry"] = "required"
	} else if _, ok := d.Steps[d.Entry]; !ok {
		bad["entry"] = "names no step"
	} else if len(d.Steps[d.Entry].Subscribes) > 0 {
		bad["steps."+d.Entry+".subscribes"] = "the entry step subscribes to nothing"
	}
	emitted := map[string]bool{}
	for _, s := range d.Steps {
		for _, e := range s.Emits {
			emitted[e] = true
		}
	}
	for _, name := range d.StepNames() {
		s := d.Steps[name]
		at := "steps." + name
		if !event.ValidName(name) {
			bad[at] = "step name " + event.NameRule
		}
		if !event.ValidName(s.Queue) {
			bad[at+".queue"] = "required, " + event.NameRule
		}
		for i, sub := range s.Subscribes {
			if !emitted[sub] {
				bad[fmt.Sprintf("%s.subscribes[%d]", at, i)] = fmt.Sprintf("no step emits %q", sub)
			}
		}
		for i, e := range s.Emits {
			if e == "" || len(e) > 256 {
				bad[fmt.Sprintf("%s.emits[%d]", at, i)] = "must be 1 to 256 characters"
			}
		}
		if p := s.RetryPolicy; p != nil {
			if p.Attempts < 1 || p.Attempts > 100 {
				bad[at+".retryPolicy.attempts"] = "must be 1 to 100"
			}
			if p.Backoff.Type != BackoffFixed && p.Backoff.Type != BackoffExponential && p.Backoff.Type != "" {
				bad[at+".retryPolicy.backoff.type"] = "must be fixed or exponential"
			}
			if p.Backoff.DelayMs < 0 {
				bad[at+".retryPolicy.backoff.delayMs"] = "must not be negative"
			}
			if p.Backoff.MaxDelayMs < 0 {
				bad[at+".retryPolicy.backoff.maxDelayMs"] = "must not be negative"
			}
		}
		if a := s.Await; a != nil && a.Type != "time" && a.Type != "event" && a.Type != "trigger" {
			bad[at+".await.type"] = "must be time, event or trigger"
		}
		if a := s.Await; a != nil {
			if a.Delay < 0 || a.Timeout < 0 {
				bad[at+".await"] = "delay and timeout must not be negative"
			}
			if _, ok := d.Steps[a.OnTimeout]; a.OnTimeout != "" && !ok {
				bad[at+".await.onTimeout"] = "names no step"
			}
			if a.Type == "event" && a.EventKind == "" {
				bad[at+".await.eventKind"] = "required for an event await"
			}
			if a.Type == "event" && a.Where != "" {
				if _, err := cond.Compile(a.Where); err != nil {
					bad[at+".await.where"] = err.Error()
				}
			}
			if len(a.Schema) > 0 {
				_, errs := CompileSchema(a.Schema, at+".await.schema")
				maps.Copy(bad, errs)
			}
		}
		if s.Timeout < 0 {
			bad[at+".timeout"] = "must not be negative"
		}
	}
	if len(d.StateSchema) > 0 {
		_, errs := CompileSchema(d.StateSchema, "stateSchema")
		maps.Copy(bad, errs)
	}
	if len(bad) == 0 {
		d.checkGraph(bad)
	}
	if len(bad) > 0 {
		return &ValidationError{Fields: bad}
	}
	return nil
}

// next lists the steps that subscribe to something step emits, and the
// step its await runs on timeout.
func (d *Definition) next(step string) []string {
	var out []string
	if a := d.Steps[step].Await; a != nil && a.OnTimeout != "" {
		out = append(out, a.OnTimeout)
	}
	for _, e := range d.Steps[step].Emits {
		for _, s := range d.Subscribers(e) {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// checkGraph finds cycles and steps the entry can never lead to.
func (d *Definition) checkGraph(bad map[string]string) {
	const (
		unseen = iota
		onPath
		done
	)
	mark := map[string]int{}
	var visit func(step string) bool
	visit = func(step string) bool {
		mark[step] = onPath
		for _, n := range d.next(step) {
			switch mark[n] {
			case onPath:
				bad["steps."+n+".subscribes"] = fmt.Sprintf("forms a cycle through step %q", step)
				return false
			case unseen:
				if !visit(n) {
					return false
				}
			}
		}
		mark[step] = done
		return true
	}
	if !visit(d.Entry) {
		return
	}
	// A cycle the entry cannot reach would also be unreachable; naming it
	// unreachable is the more useful message.
	for _, name := range d.StepNames() {
		if mark[name] == unseen {
			bad["steps."+name] = "unreachable from the entry step"
		}
	}
}

// sortedCopy keeps listings stable for clients and golden files.
func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	sort.Strings(out)
	return out
}
