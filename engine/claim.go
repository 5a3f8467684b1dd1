package engine

import (
	"context"
	"errors"
	"time"

	"github.com/nqd-dev/nqd/store"
)

// Claim hands out up to max jobs of queues, each leased to the caller for
// the engine's lease. With wait > 0 it waits that long for work to appear.
// A job redelivered after its lease expired counts as a new attempt; one
// past its step's attempts fails the step instead of being handed out.
func (e *Engine) Claim(ctx context.Context, queues []string, max int, wait time.Duration) ([]store.Job, error) {
	return e.claim(ctx, queues, max, wait, true)
}

// ClaimHanded claims as Claim does, except that while it waits it looks at
// the store no more: it answers the job a start or an emit on this instance
// hands it (handOff), or nothing once wait has passed or a hand-over's write
// failed. Many such claims can wait at once, as completions claiming their
// worker's next job do, without all looking again whenever a job is
// enqueued that none of them was handed. Only a start or an emit that
// looked for a waiting claim in the instant between this claim's look and
// its wait, and so enqueued its job unclaimed, makes it look again. On a
// store that cannot take a job claimed nothing is handed over, and it does
// not wait.
func (e *Engine) ClaimHanded(ctx context.Context, queues []string, max int, wait time.Duration) ([]store.Job, error) {
	return e.claim(ctx, queues, max, wait, false)
}

// claim is Claim, and with looksAgain false ClaimHanded.
func (e *Engine) claim(ctx context.Context, queues []string, max int, wait time.Duration, looksAgain bool) ([]store.Job, error) {
	deadline := e.opts.Now().Add(wait)
	for {
		woken := e.waiter()
		at := e.opts.Now()
		next, skip := e.empty.nextLook(queues, woken, at, e.opts.PollInterval)
		var jobs []store.Job
		if !skip {
			now := at.UnixMilli()
			var err error
			jobs, err = e.st.Claim(ctx, queues, now, now+e.opts.Lease.Milliseconds(), e.newLease(), max)
			switch {
			case err != nil && len(jobs) == 0:
				return nil, err
			case err != nil:
				// Part of the store failed; the jobs the rest answered
				// are leased to this claim, and handed out rather than
				// left to their lease's end.
				e.log.Warn().Err(err).Int("jobs", len(jobs)).Msg("a claim failed in part")
			}
			if len(jobs) == 0 {
				e.empty.found(queues, woken, at)
			}
			next = at.Add(e.opts.PollInterval)
		}
		out, err := e.handOut(ctx, jobs)
		if err != nil {
			return nil, err
		}
		if len(out) > 0 || !e.opts.Now().Before(deadline) || (!looksAgain && !e.handsOver()) {
			return out, nil
		}
		// A start or an emit on this instance may hand its job over while
		// this claim waits (handOff).
		w, missing := e.waiting.add(queues)
		d := time.Until(deadline)
		if looksAgain {
			d = min(next.Sub(e.opts.Now()), d)
		} else if missing == 0 && !closed(woken) {
			// Every start or emit that looked for a waiting claim before
			// this one is done, and nothing was enqueued unclaimed since
			// this claim looked: only a hand-over can bring it a job now.
			woken = nil
		}
		t := time.NewTimer(d)
		var handed []store.Job
		answered, woke := false, false
		select {
		case <-ctx.Done():
		case <-woken:
			woke = true
		case <-t.C:
		case handed = <-w.got:
			answered = true
		}
		t.Stop()
		if !answered && !e.waiting.remove(w) {
			// Reserved by a start or an emit: wait for its commit's outcome.
			handed = <-w.got
		}
		if len(handed) > 0 {
			return handed, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !looksAgain && !woke {
			return out, nil
		}
	}
}

// handOut takes the jobs a store claim answered: a job past its step's
// attempts fails the step instead of being handed out.
func (e *Engine) handOut(ctx context.Context, jobs []store.Job) ([]store.Job, error) {
	out := jobs[:0]
	for _, j := range jobs {
		if j.Expired {
			e.opts.Observer.LeaseExpired(j)
		}
		ok, err := e.checkAttempts(ctx, j)
		if err != nil {
			return nil, err
		}
		if ok {
			j = e.renewLate(ctx, j)
			e.opts.Observer.Claimed(j)
			e.recent.claimed(j)
			out = append(out, j)
		}
	}
	return out, nil
}

// renewLate extends the lease of a job whose claim was answered late: its
// lease started when the claim was sent, and a claim whose reply a failover
// lost is answered only once the store has sent it again, seconds later.
// With less than half of the lease left, the worker would have too little
// of it before its first heartbeat. A failed extension leaves the job as
// claimed: its lease still holds until it ends.
func (e *Engine) renewLate(ctx context.Context, j store.Job) store.Job {
	now, lease := e.nowMS(), e.opts.Lease.Milliseconds()
	if j.LeaseUntil-now >= lease/2 {
		return j
	}
	renewed, err := e.st.Heartbeat(ctx, store.JobAck{Queue: j.Queue, ID: j.ID, Lease: j.Lease}, now+lease)
	if err != nil {
		e.log.Warn().Err(err).Str("job", j.ID).Msg("a late claim's lease could not be extended")
		return j
	}
	j.LeaseUntil = renewed.LeaseUntil
	return j
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// checkAttempts fails the step of a redelivered job that has used up its
// attempts; it reports whether the job may run.
func (e *Engine) checkAttempts(ctx context.Context, j store.Job) (bool, error) {
	if j.Attempt <= 1 {
		return true, nil // every retry policy allows a first attempt
	}
	d, err := e.Definition(ctx, j.FlowName)
	if err != nil {
		return false, err
	}
	if j.Attempt <= d.Steps[j.Step].RetryPolicy.MaxAttempts() {
		return true, nil
	}
	err = e.fail(ctx, store.JobAck{Queue: j.Queue, ID: j.ID, Lease: j.Lease}, "lease expired: the worker stopped reporting", false, nil)
	if errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrRunEnded) {
		err = nil
	}
	return false, err
}

// claimable says whether j was enqueued for any claim to take, rather than
// handed to a waiting one (handOff).
func claimable(j store.Job) bool { return j.Lease == "" }

// notify wakes the claims long-polling on this instance.
func (e *Engine) notify() {
	e.wakeMu.Lock()
	close(e.wake)
	e.wake = make(chan struct{})
	e.wakeMu.Unlock()
}

func (e *Engine) waiter() <-chan struct{} {
	e.wakeMu.Lock()
	defer e.wakeMu.Unlock()
	return e.wake
}

// Beat is what a heartbeat learns.
type Beat struct {
	LeaseUntil time.Time `json:"leaseUntil"`
	// Canceled is true when the run was canceled or ended: the worker
	// should stop.
	Canceled bool `json:"canceled"`
}

// Heartbeat extends the caller's lease on a job, or says the job is gone
// (Canceled). Errors: ErrLeaseLost when another worker holds it.
func (e *Engine) Heartbeat(ctx context.Context, ack store.JobAck) (Beat, error) {
	until := e.nowMS() + e.opts.Lease.Milliseconds()
	j, err := e.st.Heartbeat(ctx, ack, until)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// The job was withdrawn (its run was canceled or failed) or is
		// done: either way its worker should stop.
		return Beat{Canceled: true}, nil
	case errors.Is(err, store.ErrConflict):
		return Beat{}, ErrLeaseLost
	case err != nil:
		return Beat{}, err
	}
	return Beat{LeaseUntil: time.UnixMilli(j.LeaseUntil).UTC()}, nil
}
