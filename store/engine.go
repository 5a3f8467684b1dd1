package store

import (
	"context"
	"encoding/json"

	"github.com/nqd-dev/nqd/event"
)

// This file is the flow engine's part of the contract: flow definitions, the
// run index with its lifecycle metadata, job queues with leases, and durable
// timers. A backend offers it beside Store; the conformance scenarios are in
// storetest (RunAll).

// DefinitionStore keeps flow definitions where every instance sees them.
type DefinitionStore interface {
	// PutDefinition stores body (a definition as JSON) under name, replacing
	// any earlier one. Errors: ErrInvalid (bad name), ErrUnavailable.
	PutDefinition(ctx context.Context, name string, body []byte) error
	// Definition returns the body stored under name. Errors: ErrNotFound,
	// ErrInvalid, ErrUnavailable.
	Definition(ctx context.Context, name string) ([]byte, error)
	// DeleteDefinition removes name. Errors: ErrNotFound, ErrInvalid,
	// ErrUnavailable.
	DeleteDefinition(ctx context.Context, name string) error
	// Definitions returns every stored body by name. Errors: ErrUnavailable.
	Definitions(ctx context.Context) (map[string][]byte, error)
}

// Run statuses kept in the run index: the flow reducer's run statuses
// (reducers/flow.go; listed in docs/compatibility.md, "Statuses").
const (
	RunRunning   = "running"
	RunAwaiting  = "awaiting"
	RunCompleted = "completed"
	RunFailed    = "failed"
	RunCancelled = "cancelled"
)

// RunStatuses are the run statuses, in lifecycle order.
var RunStatuses = []string{RunRunning, RunAwaiting, RunCompleted, RunFailed, RunCancelled}

// RunMeta is a run's lifecycle record: the index entry's metadata, which the
// v0.4/v0.5 UI reads as a run's status.
type RunMeta struct {
	FlowName       string           `json:"flow"`
	RunID          string           `json:"run"`
	Status         string           `json:"status"`
	StartedAt      int64            `json:"startedAt"`             // epoch ms; the index score
	CompletedAt    int64            `json:"completedAt,omitempty"` // epoch ms, once terminal
	StepCount      int              `json:"stepCount"`
	CompletedSteps int              `json:"completedSteps"`
	EmittedEvents  map[string]int64 `json:"emittedEvents,omitempty"` // event name -> first emit ms
	// Version counts the run's updates; an update names the version it
	// read and fails if another got there first (optimistic locking).
	Version int64 `json:"version"`
	// State is the engine's own bookkeeping (fired steps, emit payloads),
	// opaque to the store.
	State json.RawMessage `json:"state,omitempty"`
}

// Job is one step of one run waiting in, or claimed from, a queue. Its id is
// `<run>:<step>`, so a queue holds a step of a run at most once.
type Job struct {
	ID       string          `json:"id"`
	Queue    string          `json:"queue"`
	FlowName string          `json:"flowName"`
	RunID    string          `json:"runId"`
	Step     string          `json:"step"`
	Input    json.RawMessage `json:"input,omitempty"`
	// Attempt is the 1-based try this delivery is; a delivery after an
	// expired lease counts as a new try.
	Attempt int `json:"attempt"`
	// ReadyAt is when the job may first be claimed (epoch ms).
	ReadyAt int64 `json:"-"`
	// Lease identifies the current claim; empty while the job waits.
	Lease      string `json:"lease,omitempty"`
	LeaseUntil int64  `json:"leaseUntil,omitempty"` // epoch ms
	// Expired is set by Claim on a job taken over from a holder whose
	// lease ran out.
	Expired bool `json:"-"`
}

// JobID is the id of step's job in run.
func JobID(run, step string) string { return run + ":" + step }

// JobRef names a job in its queue.
type JobRef struct {
	Queue string
	ID    string
}

// JobAck names a claimed job and the lease its worker holds.
type JobAck struct {
	Queue string
	ID    string
	Lease string
}

// Timer is a durable wake-up for one step of a run, e.g. a retry after its
// backoff. A timer's identity is (Kind, FlowName, RunID, Step).
type Timer struct {
	Kind     string
	FlowName string
	RunID    string
	Step     string
	Due      int64 // epoch ms
}

// RunUpdate is one atomic change of a run: its new metadata, the events that
// cause it, and the queue and timer changes that follow from it. Either all
// of it happens or none.
type RunUpdate struct {
	// Meta is the run's new record. Meta.Version is the version the caller
	// read (0: the run must not exist yet); the store writes Version+1.
	// PrevStatus is the status the caller read, so the store moves the run
	// between the per-status indexes.
	Meta       RunMeta
	PrevStatus string
	// Events are appended to the run's stream (context flow:<RunID>) exactly
	// as Store.Append would, index rules included. May be empty.
	Events []event.Event
	// Stream, when set, is the context Events go to instead of the run's
	// stream: a record kept beside another stream, such as a schedule's
	// state beside its trigger's events. See EventStream.
	Stream Context
	// Ack, when set, deletes a claimed job and requires that it is still
	// held by Ack.Lease.
	Ack *JobAck
	// Held, when set, requires as Ack does that a claimed job is still held
	// by Held.Lease, and leaves the job as it is: a report of the job that
	// writes to its run. At most one of Ack and Held is set.
	Held *JobAck
	// Enqueue adds jobs (or replaces jobs of the same id) ready at ReadyAt.
	Enqueue []Job
	// Remove deletes jobs whether claimed or not; absent ones are ignored.
	Remove []JobRef
	// SetTimers adds or moves timers; ClearTimers deletes them.
	SetTimers   []Timer
	ClearTimers []Timer
	// Consume marks entries of the kind index consumed (see KindIndex); the
	// update is refused with ErrConflict if one already is, so of many
	// waiters one takes an event.
	Consume []KindRef
	// Claim, when set, claims jobs as RunStore.Claim would, in the same
	// atomic step once the rest of the update is written, on a backend
	// whose Features say ClaimsInUpdate (others ignore it): a
	// completion that takes its worker's next job. The jobs are in the
	// result's Claimed.
	Claim *ClaimRequest
	// IdempotencyKey, when set (at most MaxIdempotencyKey bytes, and only
	// with Events), is remembered for the run's context as an Append of
	// Events with AppendOptions.IdempotencyKey would remember it: a later
	// Append with the key within the idempotency window replays Events and
	// appends nothing. The update itself never replays; its checks alone
	// decide whether it is written. A worker's report folded into the run
	// update it causes so keeps its retries from storing its events twice.
	IdempotencyKey string
	// Definition, when set, is the body of the flow's definition the update
	// was decided on, taken from a cache. A backend whose Features say
	// ChecksDefinitions refuses the update with
	// ErrConflict unless it is the stored definition; others ignore it.
	Definition []byte
}

// ClaimRequest is a claim made with a run update (RunUpdate.Claim): the
// arguments of RunStore.Claim.
type ClaimRequest struct {
	Queues          []string
	Now, LeaseUntil int64
	Lease           string
	Max             int
}

// RunPage is one page of a flow's runs, newest first.
type RunPage struct {
	Runs  []RunMeta
	Total int64
}

// RunStore keeps the flow engine's durable state.
type RunStore interface {
	// UpdateRun applies u atomically. Errors: ErrConflict (the run's version
	// is not u.Meta.Version, or u.Ack's or u.Held's job is gone or held by
	// another lease: nothing was written), ErrInvalid, ErrUnavailable.
	UpdateRun(ctx context.Context, u RunUpdate) (AppendResult, error)
	// RunMeta returns a run's record. Errors: ErrNotFound, ErrInvalid,
	// ErrUnavailable.
	RunMeta(ctx context.Context, flow, run string) (RunMeta, error)
	// ListRuns pages over a flow's runs, newest first; with status only over
	// the runs whose record has that status. A run in the flow's index with
	// no record (written by another producer) comes with Status "".
	// Errors: ErrInvalid, ErrUnavailable.
	ListRuns(ctx context.Context, flow, status string, offset, limit int) (RunPage, error)
	// DeleteRuns removes every run of flow: streams, records and indexes,
	// and returns how many runs it removed. Errors: ErrInvalid,
	// ErrUnavailable.
	DeleteRuns(ctx context.Context, flow string) (int, error)
	// Claim hands out up to max jobs of queues (in the order given) that are
	// ready at now or whose lease expired by now, each under lease until
	// leaseUntil; a job taken over from an expired lease comes with Expired
	// set and its Attempt counted up. lease is new for each call: a store
	// that sends a claim again after its answer was lost (the Redis store)
	// knows it by its lease and answers the jobs the lease took. A store
	// whose keys are split (the Redis store's shards) may answer jobs and an
	// error together, when some parts failed: the jobs are leased to the
	// caller, who hands them out all the same. Errors: ErrInvalid,
	// ErrUnavailable, ErrOutcomeUnknown.
	Claim(ctx context.Context, queues []string, now, leaseUntil int64, lease string, max int) ([]Job, error)
	// Heartbeat extends a claimed job's lease to leaseUntil. Errors:
	// ErrNotFound (the job is gone), ErrConflict (another lease holds it),
	// ErrInvalid, ErrUnavailable.
	Heartbeat(ctx context.Context, ref JobAck, leaseUntil int64) (Job, error)
	// Job returns a job as stored. Errors: ErrNotFound, ErrInvalid,
	// ErrUnavailable.
	Job(ctx context.Context, ref JobRef) (Job, error)
	// DueTimers claims up to max timers due at now: each is moved to holdUntil
	// so no other caller takes it before then, and returned with its old Due.
	// The caller clears it with UpdateRun. As with Claim, timers may come
	// with an error, and are held for the caller all the same. Errors:
	// ErrUnavailable.
	DueTimers(ctx context.Context, now, holdUntil int64, max int) ([]Timer, error)
}
