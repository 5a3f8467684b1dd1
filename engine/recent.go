package engine

import (
	"maps"
	"sync"
	"time"

	"github.com/nqd-dev/nqd/store"
)

// recent keeps what this instance last wrote or handed out, so that the next
// decision about the same run or job can skip a store read: the run record
// each commit wrote, and each job a claim handed out, under its lease. The
// store checks both when they are used: a run update names the version it
// read and is refused when another write came between, and an ack (or a
// held job) names the lease it holds. A stale entry therefore costs a
// refused write and a fresh read, never a wrong decision; only decisions
// that end in such a checked write use it (readRunForUpdate, heldForAck,
// and Report's emits).
type recent struct {
	mu   sync.Mutex
	runs map[string]recentRun // by runKey
	jobs map[jobKey]store.Job
}

// jobKey names a job handed out under a lease: one claim hands out all its
// jobs under the same lease.
type jobKey struct{ lease, queue, id string }

type recentRun struct {
	meta store.RunMeta
	// state is meta.State decoded, when the commit had it; nil: decode.
	// Each decision that takes the record gets a copy of its own.
	state *runState
	at    time.Time
	// held is set while a decision holds the record (see takeRun), and
	// closed when the record comes back.
	held chan struct{}
}

const (
	// recentMax bounds each map; a full one forgets an arbitrary entry for
	// each it takes in.
	recentMax = 4096
	// recentTTL bounds how long a run record is trusted: past it, a read
	// from the store is as likely to be needed as not.
	recentTTL = 5 * time.Second
	// heldWait bounds how long a decision waits for a run record another
	// decision holds before it reads the store: a decision holds it for
	// one commit, a few milliseconds unless the store is slow.
	heldWait = 100 * time.Millisecond
)

func newRecent() *recent {
	return &recent{runs: map[string]recentRun{}, jobs: map[jobKey]store.Job{}}
}

func runKey(flow, run string) string { return flow + "\x00" + run }

// wrote remembers the record a commit of u wrote: u.Meta at the version
// after the one it named, and gives back the record the decision held. An
// older record than the one remembered is ignored, so that commits
// finishing out of order cannot step it back.
func (c *recent) wrote(u store.RunUpdate, st *runState) {
	m := u.Meta
	m.Version++
	// The caller's run may still change its map; the record must not.
	m.EmittedEvents = maps.Clone(m.EmittedEvents)
	k := runKey(m.FlowName, m.RunID)
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.runs[k]
	if ok && old.meta.Version >= m.Version {
		return
	}
	if ok {
		old.giveBack()
	} else if len(c.runs) >= recentMax {
		for k, e := range c.runs {
			e.giveBack()
			delete(c.runs, k)
			break
		}
	}
	c.runs[k] = recentRun{meta: m, state: st, at: time.Now()}
}

func (e recentRun) giveBack() {
	if e.held != nil {
		close(e.held)
	}
}

// takeRun hands out the remembered record of a run to one decision at a
// time: the one that ends in a run update. While one holds it, the others
// get held to wait on; once it comes back (the holder's commit wrote the
// next record, or release gave it back unchanged), the next takes it. So
// decisions about one run that overlap on this instance take turns, each
// from the record the one before wrote, instead of reading the store or
// having their updates refused. release gives the record back unchanged
// unless the holder's commit already did; it may be called any number of
// times.
func (c *recent) takeRun(flow, run string) (m store.RunMeta, st *runState, ok bool, held <-chan struct{}, release func()) {
	k := runKey(flow, run)
	c.mu.Lock()
	defer c.mu.Unlock()
	e, found := c.runs[k]
	switch {
	case !found:
		return store.RunMeta{}, nil, false, nil, func() {}
	case e.held != nil:
		return store.RunMeta{}, nil, false, e.held, func() {}
	case time.Since(e.at) >= recentTTL:
		delete(c.runs, k)
		return store.RunMeta{}, nil, false, nil, func() {}
	}
	mine := make(chan struct{})
	e.held = mine
	c.runs[k] = e
	m = e.meta
	// The decision changes its run's map; the record must not change.
	m.EmittedEvents = maps.Clone(m.EmittedEvents)
	if e.state != nil {
		st = e.state.clone()
	}
	return m, st, true, nil, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if e, ok := c.runs[k]; ok && e.held == mine {
			close(mine)
			e.held = nil
			c.runs[k] = e
		}
	}
}

// refused drops a run's record after the store refused (or may not have
// taken) an update that named version, unless the record is newer: one
// written meanwhile by another decision.
func (c *recent) refused(flow, run string, version int64) {
	k := runKey(flow, run)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.runs[k]; ok && e.meta.Version <= version {
		e.giveBack()
		delete(c.runs, k)
	}
}

// forgetRuns drops every remembered run record.
func (c *recent) forgetRuns() {
	c.mu.Lock()
	for _, e := range c.runs {
		e.giveBack()
	}
	clear(c.runs)
	c.mu.Unlock()
}

// claimed remembers a job handed out under its lease.
func (c *recent) claimed(j store.Job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.jobs) >= recentMax {
		for k := range c.jobs {
			delete(c.jobs, k)
			break
		}
	}
	c.jobs[jobKey{j.Lease, j.Queue, j.ID}] = j
}

// job returns the job remembered under ack's lease and keeps it.
func (c *recent) job(ack store.JobAck) (store.Job, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.jobs[jobKey{ack.Lease, ack.Queue, ack.ID}]
	return j, ok
}

// takeJob hands out the job remembered under ack's lease once.
func (c *recent) takeJob(ack store.JobAck) (store.Job, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := jobKey{ack.Lease, ack.Queue, ack.ID}
	j, ok := c.jobs[k]
	delete(c.jobs, k)
	return j, ok
}
