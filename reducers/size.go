package reducers

import "unsafe"

// Per-entry overheads of ApproxSize: a map entry or slice element with its
// header, pointers and the fixed fields of its struct, roughly as the Go
// runtime lays them out.
const (
	sizeState = 512
	sizeEntry = 64
	sizeStep  = 192
	sizeAwait = 160
	// A log or emit record, and the rounding of its payload's allocation
	// to a size class. Their steps, levels and event names are interned,
	// shared by every state of the process, and not counted.
	sizeLog  = int(unsafe.Sizeof(logRec{})) + 8
	sizeEmit = int(unsafe.Sizeof(emitRec{})) + 8
	// The lists' spare capacity: an empty record.
	sizeLogSlot  = int(unsafe.Sizeof(logRec{}))
	sizeEmitSlot = int(unsafe.Sizeof(emitRec{}))
)

// ApproxSize estimates the bytes s holds, for caches that bound their memory.
// It counts every value of s once, even parts shared with other states (but
// not the interned names of its logs and emits, which the whole process
// shares), and the spare capacity of its lists, which a long run keeps; it costs a walk
// over the state's collections rather than an encoding.
func ApproxSize(s State) int {
	switch st := s.(type) {
	case *FlowState:
		return st.approxSize()
	case *GenericState:
		n := sizeState
		for k := range st.kinds {
			n += sizeEntry + len(k)
		}
		return n
	case *WorkersState:
		return st.approxSize()
	case *TriggerState:
		if st.Registry != nil {
			return st.Registry.approxSize()
		}
		return sizeState + len(st.Trigger) + len(st.Type) + len(st.Config) + len(st.CorrelationID) +
			len(st.Payload) + len(st.Source) + len(st.Reason)
	}
	return sizeState
}

func (s *FlowState) approxSize() int {
	n := sizeState + len(s.Name) + len(s.RunID) + len(s.Queue) + len(s.Input) + len(s.Result) +
		len(s.Error) + len(s.Reason)
	for name, st := range s.steps {
		n += sizeStep + len(name) + len(st.Error) + len(st.Result) + len(st.AwaitType) +
			len(st.AwaitData) + len(st.NextRetryAt)
	}
	for k, v := range s.kv {
		n += sizeEntry + len(k) + len(v)
	}
	for k, a := range s.awaits {
		n += sizeAwait + len(k) + len(a.Step) + len(a.Type) + len(a.Data) + len(a.Result)
	}
	for k := range s.emitted {
		n += sizeEntry + len(k)
	}
	for _, l := range s.logs.items {
		n += sizeLog + len(l.data)
	}
	for _, e := range s.emits.items {
		n += sizeEmit + len(e.payload)
	}
	n += (cap(s.logs.items)-len(s.logs.items))*sizeLogSlot + (cap(s.emits.items)-len(s.emits.items))*sizeEmitSlot
	return n
}
