package engine

import (
	"slices"
	"sync"

	"github.com/nqd-dev/nqd/store"
)

// A start hands its run's first job straight to a claim long-polling on
// this instance, when the store can enqueue it claimed, and so does an emit
// that makes one step ready: the job is then written claimed in the start's
// (or emit's) own commit, and the claim answers when that commit is done,
// instead of waking, claiming in a commit of its own and answering after
// that. On the embedded store, where every commit waits for the disk, that
// is one commit fewer per step; on Redis, one claim script fewer.

// waiter is a claim long-polling on this instance.
type waiter struct {
	queues []string
	// got receives, once the waiter was reserved, the jobs handed to it:
	// none when the start that reserved it did not commit them.
	got chan []store.Job
}

// waiters are the claims long-polling on this instance, oldest first.
type waiters struct {
	mu   sync.Mutex
	list []*waiter
	// missing counts the starts and emits that found no claim waiting for
	// their job and have not finished their commit: a claim that begins to
	// wait meanwhile may have looked at the queues before that commit.
	missing int
}

// add puts a claim in the list and says how many commits are missing it.
func (ws *waiters) add(queues []string) (*waiter, int) {
	w := &waiter{queues: queues, got: make(chan []store.Job, 1)}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.list = append(ws.list, w)
	return w, ws.missing
}

// remove takes w out of the list; false says a start reserved it first, and
// its outcome is on the way to w.got.
func (ws *waiters) remove(w *waiter) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	i := slices.Index(ws.list, w)
	if i < 0 {
		return false
	}
	ws.list = slices.Delete(ws.list, i, i+1)
	return true
}

// reserve takes out the oldest waiter that claims from queue; the caller
// must send it the outcome. When there is none it counts the caller's
// commit as missing until the caller calls committed.
func (ws *waiters) reserve(queue string) *waiter {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for i, w := range ws.list {
		if slices.Contains(w.queues, queue) {
			ws.list = slices.Delete(ws.list, i, i+1)
			return w
		}
	}
	ws.missing++
	return nil
}

// committed ends a commit that reserve found no waiter for.
func (ws *waiters) committed() {
	ws.mu.Lock()
	ws.missing--
	ws.mu.Unlock()
}

// handsOver reports whether a start or an emit can hand its job to a
// waiting claim: whether the store can enqueue a job claimed (store.Features
// EnqueuesLeased: a job with a Lease is stored as claimed under it until
// LeaseUntil, and the update is refused with store.ErrConflict when the
// job's queue is paused).
func (e *Engine) handsOver() bool { return e.features.EnqueuesLeased }

// Waiting is how many claims long-poll on this instance.
func (e *Engine) Waiting() int {
	e.waiting.mu.Lock()
	defer e.waiting.mu.Unlock()
	return len(e.waiting.list)
}

// handOff reserves a waiting claim for the job of u's to be ready at now,
// if the store can take it claimed, and marks that job claimed under a new
// lease. The caller commits u and then calls the returned function with the
// commit's error; it delivers the job or releases the claim, and says
// whether it delivered (never when no claim waited).
func (e *Engine) handOff(u *store.RunUpdate, now int64) func(err error) bool {
	if !e.handsOver() || len(u.Enqueue) != 1 || u.Enqueue[0].ReadyAt > now {
		return nil
	}
	j := &u.Enqueue[0]
	w := e.waiting.reserve(j.Queue)
	if w == nil {
		// A claim that begins to wait before this commit is done listens
		// for its job being enqueued (see claim); it delivers nothing.
		return func(error) bool {
			e.waiting.committed()
			return false
		}
	}
	j.Lease, j.LeaseUntil = e.newLease(), now+e.opts.Lease.Milliseconds()
	claimed := *j
	return func(err error) bool {
		if err != nil {
			w.got <- nil
			return false
		}
		e.opts.Observer.Claimed(claimed)
		e.recent.claimed(claimed)
		w.got <- []store.Job{claimed}
		return true
	}
}
