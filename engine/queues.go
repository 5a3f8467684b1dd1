package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/store"
)

// Job states of the queue views, in the words of the Nuxt Queue UI (BullMQ's).
// A job waits until a worker claims it and is active while a worker holds its
// lease; a waiting job of a paused queue is paused; a step retrying after its
// backoff is delayed. nqd keeps no finished jobs: completed and failed come
// from the run index (see QueueJobs).
const (
	JobWaiting   = "waiting"
	JobActive    = "active"
	JobDelayed   = "delayed"
	JobPaused    = "paused"
	JobCompleted = "completed"
	JobFailed    = "failed"
)

// JobStates are the states a job can be in, in the order the queue views list
// them.
var JobStates = []string{JobWaiting, JobActive, JobDelayed, JobPaused, JobCompleted, JobFailed}

// maxHeldScan bounds the jobs one count or page reads among those not yet
// due (held by a worker, or not ready) to tell active from delayed: a queue
// has about one such job per busy worker.
const maxHeldScan = 10000

// QueueCounts are a queue's jobs by state. Completed and Failed count the
// finished runs of the flows that have a step on the queue.
type QueueCounts struct {
	Waiting, Active, Delayed, Paused, Completed, Failed int64
}

// Of returns the count of state.
func (c QueueCounts) Of(state string) int64 {
	switch state {
	case JobWaiting:
		return c.Waiting
	case JobActive:
		return c.Active
	case JobDelayed:
		return c.Delayed
	case JobPaused:
		return c.Paused
	case JobCompleted:
		return c.Completed
	case JobFailed:
		return c.Failed
	}
	return 0
}

// Queue is one queue as the queue views show it.
type Queue struct {
	Name   string
	Paused bool
	Counts QueueCounts
}

// QueueJob is a job with its state. A finished job is read from its run's
// record, which keeps no input: Input is then empty.
type QueueJob struct {
	store.Job
	State string
	// CreatedAt is when the job was queued (its run's start for a finished
	// one); ProcessedAt when its current lease was taken or last extended;
	// FinishedAt when its run ended. Epoch ms, 0 when unknown.
	CreatedAt, ProcessedAt, FinishedAt int64
}

// QueueNames returns every queue a stored flow names, every queue holding a
// job and every paused queue, sorted.
func (e *Engine) QueueNames(ctx context.Context) ([]string, error) {
	defs, err := e.Definitions(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, d := range defs {
		for _, s := range d.Steps {
			names = append(names, s.Queue)
		}
	}
	held, err := e.st.JobQueues(ctx)
	if err != nil {
		return nil, err
	}
	paused, err := e.st.PausedQueues(ctx)
	if err != nil {
		return nil, err
	}
	names = append(append(names, held...), paused...)
	slices.Sort(names)
	return slices.Compact(names), nil
}

// Queue returns a queue with its counts. Errors: store.ErrNotFound (no flow
// names it, it holds no job and is not paused), store.ErrInvalid.
func (e *Engine) Queue(ctx context.Context, name string) (Queue, error) {
	if !event.ValidName(name) {
		return Queue{}, nqd.Refine(store.ErrInvalid, "%q is not a queue name.", name)
	}
	names, err := e.QueueNames(ctx)
	if err != nil {
		return Queue{}, err
	}
	if _, found := slices.BinarySearch(names, name); !found {
		return Queue{}, fmt.Errorf("engine: queue %s: %w", name, store.ErrNotFound)
	}
	paused, err := e.queuePaused(ctx, name)
	if err != nil {
		return Queue{}, err
	}
	counts, err := e.queueCounts(ctx, name, paused)
	if err != nil {
		return Queue{}, err
	}
	return Queue{Name: name, Paused: paused, Counts: counts}, nil
}

// SetQueuePaused pauses or resumes a queue for every instance: a paused
// queue hands out no job until it is resumed. Errors: store.ErrInvalid.
func (e *Engine) SetQueuePaused(ctx context.Context, name string, paused bool) error {
	if err := e.st.SetQueuePaused(ctx, name, paused); err != nil {
		return err
	}
	if !paused {
		e.notify() // claims waiting here look again at once
	}
	return nil
}

func (e *Engine) queuePaused(ctx context.Context, name string) (bool, error) {
	paused, err := e.st.PausedQueues(ctx)
	if err != nil {
		return false, err
	}
	_, found := slices.BinarySearch(paused, name)
	return found, nil
}

func (e *Engine) queueCounts(ctx context.Context, name string, paused bool) (QueueCounts, error) {
	var c QueueCounts
	now := e.nowMS()
	depth, err := e.st.QueueDepth(ctx, name, now)
	if err != nil {
		return c, err
	}
	if paused {
		c.Paused = depth.Due
	} else {
		c.Waiting = depth.Due
	}
	held, err := e.heldJobs(ctx, name, now)
	if err != nil {
		return c, err
	}
	for _, j := range held {
		if j.State == JobActive {
			c.Active++
		} else {
			c.Delayed++
		}
	}
	fl, err := e.queueFlows(ctx, name)
	if err != nil {
		return c, err
	}
	for _, d := range fl {
		for status, n := range map[string]*int64{store.RunCompleted: &c.Completed, store.RunFailed: &c.Failed} {
			page, err := e.st.ListRuns(ctx, d.Name, status, 0, 1)
			if err != nil {
				return c, err
			}
			*n += page.Total
		}
	}
	return c, nil
}

// heldJobs are the queue's jobs not yet due: held by a worker (active) or
// not ready yet (delayed).
func (e *Engine) heldJobs(ctx context.Context, name string, now int64) ([]QueueJob, error) {
	jobs, err := e.st.QueueJobs(ctx, name, now+1, math.MaxInt64, 0, maxHeldScan)
	if err != nil {
		return nil, err
	}
	out := make([]QueueJob, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, e.liveJob(j, now, false))
	}
	return out, nil
}

// liveJob gives a job in its queue its state at now.
func (e *Engine) liveJob(j store.Job, now int64, paused bool) QueueJob {
	q := QueueJob{Job: j, CreatedAt: j.ReadyAt}
	switch {
	case j.Lease != "" && j.LeaseUntil > now:
		q.State, q.CreatedAt = JobActive, 0
		q.ProcessedAt = j.LeaseUntil - e.opts.Lease.Milliseconds()
	case j.ReadyAt > now:
		q.State = JobDelayed
	case paused:
		q.State = JobPaused
	default:
		q.State = JobWaiting
	}
	return q
}

// queueFlows are the stored flows with a step on queue, by name.
func (e *Engine) queueFlows(ctx context.Context, queue string) ([]*flows.Definition, error) {
	defs, err := e.Definitions(ctx)
	if err != nil {
		return nil, err
	}
	var out []*flows.Definition
	for _, d := range defs {
		for _, s := range d.Steps {
			if s.Queue == queue {
				out = append(out, d)
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b *flows.Definition) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// JobPage is one page of a queue's jobs.
type JobPage struct {
	Jobs []QueueJob
	// Total is the sum of the counts of the states asked for.
	Total int64
}

// QueueJobs pages over a queue's jobs in the states asked for, state by
// state in the order of JobStates. Waiting and paused jobs come in the
// order they will be handed out, active and delayed ones by lease end or
// ready time. Completed and failed jobs are read from the run index, newest
// run first: there, offset and limit count runs, and each run gives its
// steps on this queue that ended in that state. Errors: store.ErrNotFound
// (no such queue), store.ErrInvalid.
func (e *Engine) QueueJobs(ctx context.Context, name string, states []string, offset, limit int) (JobPage, error) {
	q, err := e.Queue(ctx, name)
	if err != nil {
		return JobPage{}, err
	}
	page := JobPage{Jobs: []QueueJob{}}
	for _, s := range JobStates {
		if !slices.Contains(states, s) {
			continue
		}
		n := q.Counts.Of(s)
		page.Total += n
		if limit <= 0 || int64(offset) >= n {
			offset = max(0, offset-int(n))
			continue
		}
		jobs, used, err := e.jobsIn(ctx, q, s, offset, limit)
		if err != nil {
			return JobPage{}, err
		}
		page.Jobs = append(page.Jobs, jobs...)
		offset, limit = 0, limit-used
	}
	return page, nil
}

// jobsIn returns a page of q's jobs in state and how much of the limit it
// used (jobs, or runs for the finished states).
func (e *Engine) jobsIn(ctx context.Context, q Queue, state string, offset, limit int) ([]QueueJob, int, error) {
	now := e.nowMS()
	switch state {
	case JobWaiting, JobPaused:
		jobs, err := e.st.QueueJobs(ctx, q.Name, math.MinInt64, now, offset, limit)
		if err != nil {
			return nil, 0, err
		}
		out := make([]QueueJob, 0, len(jobs))
		for _, j := range jobs {
			out = append(out, e.liveJob(j, now, q.Paused))
		}
		return out, len(out), nil
	case JobActive, JobDelayed:
		held, err := e.heldJobs(ctx, q.Name, now)
		if err != nil {
			return nil, 0, err
		}
		held = slices.DeleteFunc(held, func(j QueueJob) bool { return j.State != state })
		held = held[min(offset, len(held)):]
		held = held[:min(limit, len(held))]
		return held, len(held), nil
	default:
		return e.finishedJobs(ctx, q.Name, state, offset, limit)
	}
}

// finishedJobs pages over the finished runs of the queue's flows, newest
// first, merging the flows' own pages.
func (e *Engine) finishedJobs(ctx context.Context, queue, state string, offset, limit int) ([]QueueJob, int, error) {
	fl, err := e.queueFlows(ctx, queue)
	if err != nil {
		return nil, 0, err
	}
	var runs []store.RunMeta
	for _, d := range fl {
		page, err := e.st.ListRuns(ctx, d.Name, state, 0, offset+limit)
		if err != nil {
			return nil, 0, err
		}
		runs = append(runs, page.Runs...)
	}
	slices.SortStableFunc(runs, func(a, b store.RunMeta) int {
		return cmp.Or(cmp.Compare(b.StartedAt, a.StartedAt), cmp.Compare(a.FlowName, b.FlowName), cmp.Compare(a.RunID, b.RunID))
	})
	runs = runs[min(offset, len(runs)):]
	runs = runs[:min(limit, len(runs))]
	var out []QueueJob
	for _, m := range runs {
		jobs, err := runJobs(m, queue, state)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, jobs...)
	}
	return out, len(runs), nil
}

// runJobs are the steps of a finished run on queue that ended in state.
func runJobs(m store.RunMeta, queue, state string) ([]QueueJob, error) {
	var st runState
	if len(m.State) > 0 {
		if err := json.Unmarshal(m.State, &st); err != nil {
			return nil, fmt.Errorf("engine: run %s state: %w", m.RunID, err)
		}
	}
	var out []QueueJob
	for _, step := range slices.Sorted(maps.Keys(st.Steps)) {
		if s := st.Steps[step]; s.Queue == queue && finishedState(s.Status) == state {
			out = append(out, finishedJob(m, step, s))
		}
	}
	return out, nil
}

func finishedJob(m store.RunMeta, step string, s *stepState) QueueJob {
	return QueueJob{
		Job:       store.Job{ID: store.JobID(m.RunID, step), Queue: s.Queue, FlowName: m.FlowName, RunID: m.RunID, Step: step, Attempt: s.Attempt},
		State:     finishedState(s.Status),
		CreatedAt: m.StartedAt, FinishedAt: m.CompletedAt,
	}
}

// finishedState is the job state of a step that no longer has a job: its
// own end, or delayed while it waits out a retry's backoff.
func finishedState(stepStatus string) string {
	switch stepStatus {
	case stepCompleted:
		return JobCompleted
	case stepFailed:
		return JobFailed
	case stepRetrying:
		return JobDelayed
	}
	return ""
}

// QueueJob returns one job of a queue by id (`<run>:<step>`): from the
// queue while it is there, else from its run's record. Errors:
// store.ErrNotFound, store.ErrInvalid.
func (e *Engine) QueueJob(ctx context.Context, queue, id string) (QueueJob, error) {
	run, step, ok := strings.Cut(id, ":")
	if !event.ValidName(queue) || !ok || !event.ValidName(run) || !event.ValidName(step) {
		return QueueJob{}, nqd.Refine(store.ErrInvalid, "%q of queue %q is not a job id (<runId>:<step>).", id, queue)
	}
	j, err := e.st.Job(ctx, store.JobRef{Queue: queue, ID: id})
	switch {
	case err == nil:
		paused, err := e.queuePaused(ctx, queue)
		if err != nil {
			return QueueJob{}, err
		}
		return e.liveJob(j, e.nowMS(), paused), nil
	case !errors.Is(err, store.ErrNotFound):
		return QueueJob{}, err
	}
	fl, err := e.queueFlows(ctx, queue)
	if err != nil {
		return QueueJob{}, err
	}
	for _, d := range fl {
		if s, ok := d.Steps[step]; !ok || s.Queue != queue {
			continue
		}
		r, err := e.readRun(ctx, d.Name, run)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return QueueJob{}, err
		}
		if s := r.state.Steps[step]; s != nil && s.Queue == queue && finishedState(s.Status) != "" {
			return finishedJob(r.meta, step, s), nil
		}
	}
	return QueueJob{}, fmt.Errorf("engine: job %s of queue %s: %w", id, queue, store.ErrNotFound)
}

// maxLogScan bounds the events one page of a job's logs reads.
const maxLogScan = 5000

// JobLogs returns up to limit log events of a job's step (every attempt),
// from its run's stream after the id after. next is where the following page
// starts, zero when the stream was read to its end. Errors:
// store.ErrNotFound, store.ErrInvalid.
func (e *Engine) JobLogs(ctx context.Context, queue, id string, after event.ID, limit int) (logs []event.Event, next event.ID, err error) {
	j, err := e.QueueJob(ctx, queue, id)
	if err != nil {
		return nil, event.ID{}, err
	}
	c := store.Context{Type: "flow", ID: j.RunID}
	logs = []event.Event{}
	const chunk = 500
	for scanned := 0; scanned < maxLogScan && len(logs) < limit; {
		evs, err := e.st.Range(ctx, c, store.RangeQuery{After: after, Limit: chunk})
		if err != nil {
			return nil, event.ID{}, err
		}
		for _, ev := range evs {
			after = ev.ID
			if event.IsLog(ev.Kind) && ev.Step == j.Step {
				logs = append(logs, ev)
				if len(logs) == limit {
					return logs, after, nil
				}
			}
		}
		if len(evs) < chunk {
			return logs, event.ID{}, nil
		}
		scanned += len(evs)
	}
	return logs, after, nil
}

// AddJob puts a job on a queue the only way nqd makes one: it starts a run
// of flow, whose entry step must run on queue, with data as the input.
// Errors: ErrNotEntryQueue, store.ErrNotFound (no such flow).
func (e *Engine) AddJob(ctx context.Context, queue, flow string, data json.RawMessage) (Started, error) {
	d, err := e.Definition(ctx, flow)
	if err != nil {
		return Started{}, err
	}
	if entry := d.Steps[d.Entry]; entry.Queue != queue {
		return Started{}, fmt.Errorf("%w: flow %s starts on queue %s", ErrNotEntryQueue, flow, entry.Queue)
	}
	return e.Start(ctx, flow, data, "")
}

// ErrNotEntryQueue: a job can only be added to the queue of a flow's entry
// step, by starting a run.
var ErrNotEntryQueue = fmt.Errorf("engine: not the flow's entry queue: %w", store.ErrInvalid)
