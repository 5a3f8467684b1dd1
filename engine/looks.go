package engine

import (
	"sync"
	"time"
)

// emptyLooks remembers, per queue, the last claim whose look at the store
// found nothing: when, and the engine's wake channel at the time. While the
// channel is unchanged nothing was enqueued on this instance since, so a
// look within a poll interval of that one could only find work another
// instance enqueued or work that fell due by time, which claims find
// within a poll interval anyway. A claim then skips its look and waits for
// the next one. This spares the store a call each time a worker asks again
// right after a claim or a completion that found nothing, which in a steady
// flow of runs is most asks.
type emptyLooks struct {
	mu sync.Mutex
	m  map[string]emptyLook
}

type emptyLook struct {
	wake <-chan struct{}
	at   time.Time
}

// maxEmptyLooks bounds the queues remembered: past it, the memory starts
// over, which costs only looks.
const maxEmptyLooks = 1024

// found records that a look at queues at at, begun under wake, found
// nothing.
func (l *emptyLooks) found(queues []string, wake <-chan struct{}, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil || len(l.m)+len(queues) > maxEmptyLooks {
		l.m = make(map[string]emptyLook, len(queues))
	}
	for _, q := range queues {
		l.m[q] = emptyLook{wake: wake, at: at}
	}
}

// nextLook says whether a claim of queues at now, under wake, may skip its
// look, and if so when it must look again: a poll interval after the oldest
// of their empty looks.
func (l *emptyLooks) nextLook(queues []string, wake <-chan struct{}, now time.Time, poll time.Duration) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var oldest time.Time
	for i, q := range queues {
		el, ok := l.m[q]
		if !ok || el.wake != wake || !now.Before(el.at.Add(poll)) {
			return time.Time{}, false
		}
		if i == 0 || el.at.Before(oldest) {
			oldest = el.at
		}
	}
	return oldest.Add(poll), len(queues) > 0
}
