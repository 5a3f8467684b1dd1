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
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/store"
)

// Store is what the engine keeps its state in.
type Store interface {
	store.Store
	store.DefinitionStore
	store.RunStore
	store.QueueStore
	store.KindIndex
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
	// checksDefs: the store checks definitions on update (definitionChecker),
	// so starts may be decided on defs.
	checksDefs bool
	// claimsInUpdate: the store claims in its run updates (updateClaimer),
	// so completions may claim in their own write.
	claimsInUpdate bool

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

type cachedDef struct {
	body []byte
	def  *flows.Definition
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
	dc, ok := st.(definitionChecker)
	uc, claims := st.(updateClaimer)
	return &Engine{st: st, opts: opts, log: opts.Logger, defs: map[string]cachedDef{}, checksDefs: ok && dc.ChecksDefinitions(),
		claimsInUpdate: claims && uc.ClaimsInUpdate(), wake: make(chan struct{}), recent: newRecent(),
		random: randomBytes{r: bufio.NewReaderSize(rand.Reader, randomBuffer)}}
}

func (e *Engine) nowMS() int64 { return e.opts.Now().UnixMilli() }

// maxRetries bounds how often one decision is retried after losing a race;
// each loss means another writer made progress, so this is never reached in
// practice.
const maxRetries = 100

// Definition returns the flow definition name. Errors: store.ErrNotFound.
func (e *Engine) Definition(ctx context.Context, name string) (*flows.Definition, error) {
	body, err := e.st.Definition(ctx, name)
	if err != nil {
		return nil, err
	}
	e.defsMu.Lock()
	c, ok := e.defs[name]
	e.defsMu.Unlock()
	if ok && string(c.body) == string(body) {
		return c.def, nil
	}
	d, err := flows.Parse(body, false, name)
	if err != nil {
		return nil, fmt.Errorf("engine: stored flow %q: %w", name, err)
	}
	e.defsMu.Lock()
	e.defs[name] = cachedDef{body: body, def: d}
	e.defsMu.Unlock()
	return d, nil
}

// definitionChecker is a store whose UpdateRun refuses an update naming a
// Definition that is not the flow's stored one (store.RunUpdate.Definition).
// On such a store a start may be decided on a cached definition without
// reading it first: a definition changed meanwhile, on any instance, makes
// the write fail and the start is decided again on the stored one.
type definitionChecker interface {
	ChecksDefinitions() bool
}

// checkedDefinition returns the cached definition of name and its body,
// when the store checks definitions on update; nil otherwise.
func (e *Engine) checkedDefinition(name string) ([]byte, *flows.Definition) {
	if !e.checksDefs {
		return nil, nil
	}
	e.defsMu.Lock()
	defer e.defsMu.Unlock()
	c, ok := e.defs[name]
	if !ok {
		return nil, nil
	}
	return c.body, c.def
}

// PutDefinition validates d and stores it for every instance. The kinds
// its event awaits wait for are watched first (see store.KindIndex), so the
// kind index holds every such event appended once the definition exists.
func (e *Engine) PutDefinition(ctx context.Context, d *flows.Definition) error {
	if err := d.Validate(); err != nil {
		return err
	}
	body, err := json.Marshal(d)
	if err != nil {
		return err
	}
	if err := e.watchKinds(ctx, d); err != nil {
		return err
	}
	err = e.st.PutDefinition(ctx, d.Name, body)
	e.forgetDefinition(d.Name)
	return err
}

// forgetDefinition drops name from the cache, so that this instance's next
// start reads the definition it just changed rather than be refused once.
func (e *Engine) forgetDefinition(name string) {
	e.defsMu.Lock()
	delete(e.defs, name)
	e.defsMu.Unlock()
}

// Definitions returns every stored definition, by name.
func (e *Engine) Definitions(ctx context.Context) ([]*flows.Definition, error) {
	all, err := e.st.Definitions(ctx)
	if err != nil {
		return nil, err
	}
	var out []*flows.Definition
	for name := range all {
		d, err := e.Definition(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// runState is the engine's bookkeeping inside store.RunMeta.State.
type runState struct {
	Input json.RawMessage `json:"input,omitempty"`
	// Steps holds every step that fired, by name.
	Steps map[string]*stepState `json:"steps"`
	// Emits holds each emitted event's first payload, by event name.
	Emits map[string]json.RawMessage `json:"emits,omitempty"`
	// Awaits holds every await the run registered, by await id (a
	// trigger's is its trigger id).
	Awaits map[string]*awaitState `json:"awaits,omitempty"`
}

// Engine step statuses: a queued step has a job (waiting or claimed), a
// retrying one a timer.
const (
	stepQueued    = "queued"
	stepRetrying  = "retrying"
	stepCompleted = "completed"
	stepFailed    = "failed"
)

type stepState struct {
	Status  string `json:"status"`
	Attempt int    `json:"attempt"`
	Queue   string `json:"queue"`
	// Await is the id of the await an awaiting step waits on.
	Await string `json:"await,omitempty"`
	// Acked says which lease last finished an attempt of the step and how
	// (ackedBy), so that a worker repeating that report gets its answer
	// again instead of a conflict.
	Acked string `json:"acked,omitempty"`
}

func (s *stepState) active() bool {
	return s.Status == stepQueued || s.Status == stepRetrying || s.Status == stepAwaiting
}

// run is a run's record as read, with its decoded state.
type run struct {
	meta  store.RunMeta
	state runState
	// readStatus is the status the record had when it was read ("" for a
	// new run): the store moves the run out of that status's index.
	readStatus string
	// cancelled lists the triggers end withdrew, whose streams get
	// trigger.cancelled once the end is committed.
	cancelled []string
	// encoded is the state the last update encoded, and encodedState a
	// copy of the state it encoded (see committed).
	encoded      json.RawMessage
	encodedState *runState
}

func (e *Engine) readRun(ctx context.Context, flow, id string) (*run, error) {
	m, err := e.st.RunMeta(ctx, flow, id)
	if err != nil {
		return nil, err
	}
	return decodeRun(m, id)
}

// readRunForUpdate is readRun for a decision that ends in a run update: it
// takes the record this instance wrote last when it has one, which the
// update's version check proves current or refuses (see recent), waiting
// its turn while another decision about the run holds it. The decision
// calls release when it is done, whether or not it wrote.
func (e *Engine) readRunForUpdate(ctx context.Context, flow, id string) (*run, func(), error) {
	var wait *time.Timer // made only once a decision has to wait
	for {
		m, st, ok, held, release := e.recent.takeRun(flow, id)
		if ok && st != nil {
			return &run{meta: m, state: *st, readStatus: m.Status}, release, nil
		}
		if ok {
			r, err := decodeRun(m, id)
			if err != nil {
				release()
				return nil, nil, err
			}
			return r, release, nil
		}
		if held == nil {
			break
		}
		if wait == nil {
			wait = time.NewTimer(heldWait)
			defer wait.Stop()
		}
		select {
		case <-held:
			continue
		case <-wait.C:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		break // the holder is slow: read the store
	}
	r, err := e.readRun(ctx, flow, id)
	return r, func() {}, err
}

func decodeRun(m store.RunMeta, id string) (*run, error) {
	r := &run{meta: m, readStatus: m.Status}
	if len(m.State) > 0 {
		if err := json.Unmarshal(m.State, &r.state); err != nil {
			return nil, fmt.Errorf("engine: run %s state: %w", id, err)
		}
	}
	if r.state.Steps == nil {
		r.state.Steps = map[string]*stepState{}
	}
	if r.state.Emits == nil {
		r.state.Emits = map[string]json.RawMessage{}
	}
	return r, nil
}

func (r *run) ended() bool {
	switch r.meta.Status {
	case store.RunCompleted, store.RunFailed, store.RunCancelled:
		return true
	}
	return false
}

// update returns the RunUpdate that writes r's new record.
func (r *run) update() (store.RunUpdate, error) {
	st, err := json.Marshal(r.state)
	if err != nil {
		return store.RunUpdate{}, err
	}
	r.encoded, r.encodedState = st, r.state.clone().compacted()
	m := r.meta
	m.State = st
	return store.RunUpdate{Meta: m, PrevStatus: r.readStatus}, nil
}

// compacted makes s's JSON values what encoding and decoding s would make
// them (json.Marshal compacts a json.RawMessage and escapes <, >, & and
// U+2028/U+2029 in it), replacing any value that is not by such a copy.
func (s *runState) compacted() *runState {
	s.Input = compactJSON(s.Input)
	for k, v := range s.Emits {
		s.Emits[k] = compactJSON(v)
	}
	for _, aw := range s.Awaits {
		aw.Input, aw.Outcome = compactJSON(aw.Input), compactJSON(aw.Outcome)
	}
	if len(s.Awaits) == 0 {
		s.Awaits = nil // an empty map is left out of the record
	}
	return s
}

// compactJSON returns b as json.Marshal writes a json.RawMessage: compact,
// with <, >, & and U+2028/U+2029 escaped; b itself when it has nothing that
// would change.
func compactJSON(b json.RawMessage) json.RawMessage {
	if !bytes.ContainsAny(b, " \t\r\n<>&\u2028\u2029") {
		return b
	}
	var c bytes.Buffer
	if err := json.Compact(&c, b); err != nil {
		return b
	}
	var out bytes.Buffer
	json.HTMLEscape(&out, c.Bytes())
	return out.Bytes()
}

// committed is the state u writes, decoded, when r's last update encoded
// it (nil otherwise): a decision that takes the record next starts from a
// copy of it instead of decoding the record again.
func (r *run) committed(u store.RunUpdate) *runState {
	if r == nil || len(u.Meta.State) == 0 || len(r.encoded) == 0 || &u.Meta.State[0] != &r.encoded[0] {
		return nil
	}
	return r.encodedState
}

// clone copies s deep enough that a decision changing its copy changes
// nothing of s: the maps and the step and await records; the JSON values
// are never written in place and are shared.
func (s *runState) clone() *runState {
	c := &runState{Input: s.Input, Steps: make(map[string]*stepState, len(s.Steps)), Emits: maps.Clone(s.Emits)}
	for k, v := range s.Steps {
		st := *v
		c.Steps[k] = &st
	}
	if c.Emits == nil {
		c.Emits = map[string]json.RawMessage{}
	}
	if s.Awaits != nil {
		c.Awaits = make(map[string]*awaitState, len(s.Awaits))
		for k, v := range s.Awaits {
			aw := *v
			c.Awaits[k] = &aw
		}
	}
	return c
}

// retry runs decide until its update is not refused by a concurrent one.
func (e *Engine) retry(ctx context.Context, decide func() error) error {
	for range maxRetries {
		err := decide()
		if !errors.Is(err, errRace) {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return fmt.Errorf("engine: gave up after %d conflicting updates", maxRetries)
}

// errRace marks a refused update that is worth deciding again.
var errRace = errors.New("engine: concurrent update")

// commit writes u, decided about r (nil when none was read).
func (e *Engine) commit(ctx context.Context, r *run, u store.RunUpdate) (store.AppendResult, error) {
	res, err := e.st.UpdateRun(ctx, u)
	if err != nil {
		e.recent.refused(u.Meta.Flow, u.Meta.Run, u.Meta.Version)
	}
	if errors.Is(err, store.ErrConflict) {
		return res, errRace
	}
	if err == nil {
		e.recent.wrote(u, r.committed(u))
		e.opts.Observer.Committed(u)
	}
	if err == nil && slices.ContainsFunc(u.Enqueue, claimable) {
		e.notify()
	}
	return res, err
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

// newRunID returns a version 7 UUID: its leading bits are the time, and ids
// made by one process only grow, so the keys of runs started close together
// are neighbours in every store's indexes and a commit rewrites fewer pages.
// NewV7 fails only if the system's random source does, which Go treats as
// fatal anyway.
func (e *Engine) newRunID() string {
	return uuid.Must(uuid.NewV7FromReader(&e.random)).String()
}

// idempotentRunID derives the run id from the key, so a repeated start
// finds the run the first one created.
func idempotentRunID(flow, key string) string {
	sum := sha256.Sum256([]byte(flow + "\x00" + key))
	return "idem-" + hex.EncodeToString(sum[:16])
}

func (e *Engine) newLease() string {
	var b [12]byte
	_, _ = e.random.Read(b[:])
	return hex.EncodeToString(b[:])
}

// randomBuffer is how many bytes of crypto/rand randomBytes reads at once,
// so that a run id or a lease costs a copy rather than a call into the
// system's random source (which also grew the caller's stack each time).
const randomBuffer = 4 << 10

// randomBytes is crypto/rand read ahead, safe for concurrent use.
type randomBytes struct {
	mu sync.Mutex
	r  *bufio.Reader
}

func (b *randomBytes) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return io.ReadFull(b.r, p)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only for values built here from JSON-safe types
	}
	return b
}

func isoMS(ms int64) string { return time.UnixMilli(ms).UTC().Format(event.TimeFormat) }

// flowEvent is an event of run r's stream.
func flowEvent(r *run, kind, step string, data any) event.Event {
	ev := event.Event{Kind: kind, Subject: r.meta.Run, RunID: r.meta.Run, FlowName: r.meta.Flow, Step: step}
	if data != nil {
		ev.Data = mustJSON(data)
	}
	return ev
}

func withAttempt(ev event.Event, attempt int, extra map[string]any) event.Event {
	m := map[string]any{"attempt": attempt}
	for k, v := range extra {
		m[k] = v
	}
	ev.Attempt = attempt
	ev.Meta = mustJSON(m)
	return ev
}

// DeleteDefinition removes a flow definition; its runs stay. Errors:
// store.ErrNotFound.
func (e *Engine) DeleteDefinition(ctx context.Context, name string) error {
	err := e.st.DeleteDefinition(ctx, name)
	e.forgetDefinition(name)
	return err
}
