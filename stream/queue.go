package stream

import "sync"

// queue is one connection's send queue, bounded in events and in bytes. The
// hub pushes into it and never waits: a queue that would overflow either
// fails (the connection is then closed and the client resumes by
// Last-Event-ID) or, while the connection is still reading its backfill,
// forgets its frames and remembers that it must read the hole from the stream.
type queue struct {
	tail     bool // the connection writes the raw-tail form
	maxN     int
	maxBytes int

	mu     sync.Mutex
	cut    func() // ends the connection's blocked write; set by the writer
	notify func() // "there is something to take"; set by the writer
	frames []*frame
	bytes  int
	soft   bool // overflow means a hole, not a failure
	lost   bool // frames were forgotten; read them from the stream
	failed bool
}

func newQueue(tail bool, maxN, maxBytes int) *queue {
	return &queue{tail: tail, maxN: maxN, maxBytes: maxBytes, soft: true}
}

// push adds f and reports whether the queue still wants frames.
func (q *queue) push(f *frame) bool {
	ok, cut := q.add(f)
	if cut != nil {
		// The writer may be blocked on a client that stopped reading: it
		// would notice the overflow only once the write timed out.
		cut()
	}
	return ok
}

// add is push under the lock; cut is what push must call once unlocked.
func (q *queue) add(f *frame) (ok bool, cut func()) {
	n := len(f.bytesFor(q.tail))
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.failed {
		return false, nil
	}
	// An empty queue takes any frame, so one event larger than the byte
	// bound still reaches a client that keeps up.
	if len(q.frames) > 0 && (len(q.frames) >= q.maxN || q.bytes+n > q.maxBytes) {
		clear(q.frames)
		q.frames, q.bytes = q.frames[:0], 0
		if !q.soft {
			q.failed = true
			q.frames = nil
			q.signal()
			return false, q.cut
		}
		q.lost = true
	}
	q.frames = append(q.frames, f)
	q.bytes += n
	q.signal()
	return true, nil
}

// onFail sets what ends the connection when the queue fails: cut must be
// safe to call from another goroutine while the connection writes.
func (q *queue) onFail(cut func()) {
	q.mu.Lock()
	q.cut = cut
	q.mu.Unlock()
}

// signal tells the writer there is something to take. Before the writer
// has set notify (during the backfill) there is no one to tell: onSignal
// tells it then.
func (q *queue) signal() {
	if q.notify != nil {
		q.notify()
	}
}

// onSignal makes the queue call notify, which must not block, under its
// lock each time it signals, and calls it once now when something is
// queued already.
func (q *queue) onSignal(notify func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.notify = notify
	if len(q.frames) > 0 || q.failed {
		notify()
	}
}

// holes reports whether frames were forgotten that the stream must supply.
func (q *queue) holes() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.lost
}

// take hands over the queued frames, giving spare (emptied) back to the queue
// for reuse. lost reports a hole before the frames; failed, an overflow.
func (q *queue) take(spare []*frame) (frames []*frame, lost, failed bool) {
	clear(spare)
	q.mu.Lock()
	defer q.mu.Unlock()
	frames, lost, failed = q.frames, q.lost, q.failed
	if !failed {
		q.frames = spare[:0]
	}
	q.bytes, q.lost = 0, false
	return frames, lost, failed
}

// harden makes the next overflow fail the queue: from now on the connection
// only writes, and a client that does not read must not hold memory.
func (q *queue) harden() {
	q.mu.Lock()
	q.soft = false
	q.mu.Unlock()
}
