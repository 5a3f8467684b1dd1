package store

import (
	"fmt"

	"github.com/nqd-dev/nqd/event"
)

// JoinedIndex is the index rule of the Store contract for one appended event:
// the named index e adds its context to, beyond the type index every context
// joins with its first event. A `flow.started` (or `flow.start`) with a flow
// name joins Index{Type: "flow", Name: FlowName}, the runs of that flow; a
// `trigger.registered` joins Index{Type: "trigger"}. A backend refuses an
// append whose joined index is not Valid (a bad flow name) with ErrInvalid.
//
// Every backend decides with this function. The Redis scripts
// (append_events in store/redisstore/scripts/lib.lua, which append.lua and
// run_update.lua share, and restore.lua) only add the context to the index
// keys the Go side names with it; a script that decided by itself would have
// to follow the same rule.
func JoinedIndex(e event.Event) (Index, bool) {
	switch {
	case (e.Kind == "flow.started" || e.Kind == "flow.start") && e.FlowName != "":
		return Index{Type: "flow", Name: e.FlowName}, true
	case e.Kind == "trigger.registered":
		return Index{Type: "trigger"}, true
	}
	return Index{}, false
}

// EncodeEvents checks a batch's events by the rules every backend applies
// before it writes (a valid kind, a valid name for the index an event joins)
// and returns their stored bodies. Errors wrap ErrInvalid.
func EncodeEvents(evs []event.Event) ([][]byte, error) {
	bodies := make([][]byte, len(evs))
	for i, e := range evs {
		if !event.ValidKind(e.Kind) {
			return nil, fmt.Errorf("%w: event %d: kind %q", ErrInvalid, i, e.Kind)
		}
		if ix, ok := JoinedIndex(e); ok && !ix.Valid() {
			return nil, fmt.Errorf("%w: event %d: index name %q", ErrInvalid, i, ix.Name)
		}
		body, err := e.MarshalBody()
		if err != nil {
			return nil, fmt.Errorf("%w: event %d: %v", ErrInvalid, i, err)
		}
		bodies[i] = body
	}
	return bodies, nil
}
