package reducers

import "sync/atomic"

// tail is a bounded list that keeps its newest entries and is shared between
// successive states. Appending to the newest state of a chain writes into the
// spare capacity of the shared array, so a fold of n log events copies nothing
// per event. Older states still see only their own prefix of the array, and
// appending to one of them copies, because the slot after its end is taken.
//
// free counts the unused slots at the end of the array and is shared by every
// tail on that array. A tail whose cap-len equals free ends where the array's
// newest entry ends; claiming the next slot is a compare-and-swap, so two
// goroutines extending the same state never write the same slot.
type tail[T any] struct {
	items []T
	free  *atomic.Int64
}

// push returns the list with x appended, keeping at most limit entries.
func (l tail[T]) push(x T, limit int) tail[T] {
	n := len(l.items)
	if l.free != nil && n < cap(l.items) {
		spare := int64(cap(l.items) - n)
		if l.free.CompareAndSwap(spare, spare-1) {
			items := l.items[:n+1]
			items[n] = x
			return tail[T]{items: keepNewest(items, limit), free: l.free}
		}
	}
	keep := keepNewest(l.items, limit-1)
	// Twice the limit bounds the memory an array holds on to while its front is
	// trimmed away, and still makes a copy rare.
	size := min(max(8, 2*(len(keep)+1)), 2*limit)
	items := make([]T, len(keep)+1, max(size, len(keep)+1))
	copy(items, keep)
	items[len(keep)] = x
	free := new(atomic.Int64)
	free.Store(int64(cap(items) - len(items)))
	return tail[T]{items: items, free: free}
}

func keepNewest[T any](items []T, limit int) []T {
	if limit < 0 {
		limit = 0
	}
	if len(items) > limit {
		return items[len(items)-limit:]
	}
	return items
}

func (l tail[T]) len() int { return len(l.items) }
