// Package engine coordinates flow runs from durable state: it starts runs,
// hands steps to workers through queues, fires a step once every event it
// subscribes to was emitted in the run (fan-in), retries failed steps after
// their backoff, and writes exactly one terminal event per run.
//
// Every decision is one store.RunStore.UpdateRun: the engine reads the run's
// record, decides, and writes the record, the events that caused the change,
// and the queue and timer changes together, naming the version it read. If
// another instance (or a redelivered report) got there first the write is
// refused and the engine decides again from the newer record. So a step
// fires once, a run ends once, and the run index never disagrees with the
// stream, on any number of instances.
package engine

import (
	"bufio"
	"crypto/rand"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/store"
)

// Store is what the engine keeps its state in.
type Store interface {
	store.Store
	store.DefinitionStore
	store.RunStore
	store.QueueStore
	store.KindIndex
	// Features says where the store differs from others; the engine reads
	// it once, in New.
	Features() store.Features
}

// Errors the engine adds to the store's sentinels.
var (
	// ErrLeaseLost: the job is no longer held by the caller's lease (it
	// expired and another worker took the job, or the job is done).
	ErrLeaseLost error = &nqd.Error{Code: nqd.CodeConflict, Message: "The job is no longer held by this lease.", Err: store.ErrConflict}
	// ErrRunEnded: the run was canceled or has ended; nothing more runs.
	ErrRunEnded error = &nqd.Error{Code: nqd.CodeConflict, Message: "The run has ended or was canceled."}
)

// Options tune an Engine. The zero value is usable.
type Options struct {
	// Now is the engine's clock; default time.Now. Tests pass a fake one.
	Now func() time.Time
	// Lease is how long a claimed job stays with its worker without a
	// heartbeat; default DefaultLease.
	Lease time.Duration
	// Interval is how often Run looks for due retries; default 250ms.
	Interval time.Duration
	// PollInterval is how often the claims on this instance look for work
	// that another instance enqueued, or that became due by time; default
	// 200ms.
	PollInterval time.Duration
	// Triggers signs and verifies trigger ids; default a key that lives as
	// long as the process (ids do not survive a restart and other instances
	// refuse them), so a deployment sets its own keys.
	Triggers *auth.TriggerSigner
	// TriggerMaxAge is how long a trigger without a timeout stays valid;
	// default 7 days.
	TriggerMaxAge time.Duration
	// EventLookback is how far before its registration an event await
	// looks for a matching event; default 1 minute. It must stay within
	// the store's kind window.
	EventLookback time.Duration
	// EventPoll is how often a pending event await looks for new events;
	// default 1s.
	EventPoll time.Duration
	Logger    zerolog.Logger
	// Observer is told what the engine did, for metrics; default none.
	Observer Observer
}

// DefaultLease is how long a claimed job stays with its worker without a
// heartbeat unless Options set another.
const DefaultLease = 30 * time.Second

// Observer is told what the engine did, after the store accepted it. Its
// methods are called on the engine's paths and must return quickly.
type Observer interface {
	// Committed is called with each run update the store applied: its
	// events tell what changed (flow.started, step.retry, flow.completed,
	// step.await.*, step.resumed ...).
	Committed(u store.RunUpdate)
	// Claimed is called for each job handed to a worker: one attempt of
	// its step.
	Claimed(j store.Job)
	// LeaseExpired is called for each job a claim took over from a worker
	// whose lease ran out.
	LeaseExpired(j store.Job)
	// TimerDue is called for each due timer the engine took, with how long
	// after its due time it was taken.
	TimerDue(t store.Timer, late time.Duration)
}

type nopObserver struct{}

func (nopObserver) Committed(store.RunUpdate)           {}
func (nopObserver) Claimed(store.Job)                   {}
func (nopObserver) LeaseExpired(store.Job)              {}
func (nopObserver) TimerDue(store.Timer, time.Duration) {}

// Engine runs flows. It is safe for concurrent use.
type Engine struct {
	st   Store
	opts Options
	log  zerolog.Logger

	defsMu sync.Mutex
	defs   map[string]cachedDef
	// features are the store's, read once: whether starts may be decided
	// on defs (ChecksDefinitions), completions claim in their own write
	// (ClaimsInUpdate), and jobs are handed to waiting claims
	// (EnqueuesLeased).
	features store.Features

	wakeMu sync.Mutex
	wake   chan struct{}

	// timerKinds holds the handlers of timer kinds others own (HandleTimers).
	timerKinds sync.Map

	// conds caches compiled event await conditions by source; cursors
	// holds, by await id, the last kind index entry an event await
	// looked at on this instance.
	conds   sync.Map
	cursors sync.Map

	recent  *recent
	waiting waiters
	empty   emptyLooks
	random  randomBytes
}

// New returns an engine on st.
func New(st Store, opts Options) *Engine {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Lease <= 0 {
		opts.Lease = DefaultLease
	}
	if opts.Interval <= 0 {
		opts.Interval = 250 * time.Millisecond
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 200 * time.Millisecond
	}
	if opts.Triggers == nil {
		opts.Triggers, _ = auth.NewTriggerSigner(auth.RandomKey())
	}
	if opts.TriggerMaxAge <= 0 {
		opts.TriggerMaxAge = 7 * 24 * time.Hour
	}
	if opts.EventLookback <= 0 {
		opts.EventLookback = time.Minute
	}
	if opts.EventPoll <= 0 {
		opts.EventPoll = time.Second
	}
	if opts.Observer == nil {
		opts.Observer = nopObserver{}
	}
	return &Engine{st: st, opts: opts, log: opts.Logger, defs: map[string]cachedDef{}, features: st.Features(),
		wake: make(chan struct{}), recent: newRecent(),
		random: randomBytes{r: bufio.NewReaderSize(rand.Reader, randomBuffer)}}
}

func (e *Engine) nowMS() int64 { return e.opts.Now().UnixMilli() }
