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
	at   time.Time
}

const (
	// recentMax bounds each map; a full one forgets an arbitrary entry for
	// each it takes in.
	recentMax = 4096
	// recentTTL bounds how long a run record is trusted: past it, a read
	// from the store is as likely to be needed as not.
	recentTTL = 5 * time.Second
)

func newRecent() *recent {
	return &recent{runs: map[string]recentRun{}, jobs: map[jobKey]store.Job{}}
}

func runKey(flow, run string) string { return flow + "\x00" + run }

// wrote remembers the record a commit of u wrote: u.Meta at the version
// after the one it named. An older record than the one remembered is
// ignored, so that commits finishing out of order cannot step it back.
func (c *recent) wrote(u store.RunUpdate) {
	m := u.Meta
	m.Version++
	// The caller's run may still change its map; the record must not.
	m.EmittedEvents = maps.Clone(m.EmittedEvents)
	k := runKey(m.Flow, m.Run)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.runs[k]; ok && old.meta.Version >= m.Version {
		return
	}
	if len(c.runs) >= recentMax {
		for k := range c.runs {
			delete(c.runs, k)
			break
		}
	}
	c.runs[k] = recentRun{meta: m, at: time.Now()}
}

// takeRun hands out the remembered record of a run once.
func (c *recent) takeRun(flow, run string) (store.RunMeta, bool) {
	k := runKey(flow, run)
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.runs[k]
	if !ok {
		return store.RunMeta{}, false
	}
	delete(c.runs, k)
	return e.meta, time.Since(e.at) < recentTTL
}

// forgetRun drops a run's record, after the store refused a write based on
// it or the run was deleted.
func (c *recent) forgetRun(flow, run string) {
	c.mu.Lock()
	delete(c.runs, runKey(flow, run))
	c.mu.Unlock()
}

// forgetRuns drops every remembered run record.
func (c *recent) forgetRuns() {
	c.mu.Lock()
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
