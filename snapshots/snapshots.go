// Package snapshots serves contexts' reduced states: a bounded LRU of
// `(state, position)` per context that is brought up to date by folding only
// the events after its position, checkpoints written beside the stream every
// so many events so a cold rebuild folds only the tail, and time travel to
// any earlier position.
//
// Every cached state is the fold of all its context's events up to and
// including its position. Stores give each new event an id after every
// existing one, so such a state stays true forever; extending it with the
// events after its position gives the newest state. A read asks the store for
// those events after the read began, so it never answers a state older than
// what the store held when the read started (read your writes), and the
// cache needs no invalidation and no subscription: live events are folded
// into the cached state by the next read, never refolded from the start.
package snapshots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/reducers"
	"github.com/nqd-dev/nqd/store"
)

// Reader is the part of store.Store the cache reads.
type Reader interface {
	Range(ctx context.Context, c store.Context, q store.RangeQuery) ([]event.Event, error)
}

// TTL is how long a cached state lives after it was last updated, by the
// status of its run. Failed runs are kept longest, for debugging.
type TTL struct {
	Active    time.Duration // running or awaiting flows, registered triggers, other contexts
	Completed time.Duration // completed or cancelled flows, fired or cancelled triggers
	Failed    time.Duration // failed flows, timed out triggers
}

// DefaultTTL keeps active contexts a day, completed runs a week and failed
// runs thirty days.
var DefaultTTL = TTL{Active: 24 * time.Hour, Completed: 7 * 24 * time.Hour, Failed: 30 * 24 * time.Hour}

// Options tune a Cache. Zero fields take the defaults below, but for
// CheckpointEvery, where zero means no checkpoints.
type Options struct {
	// MaxEntries bounds the contexts cached; default 1000.
	MaxEntries int
	// MaxBytes bounds the cached states' estimated size
	// (reducers.ApproxSize); default 100 MiB.
	MaxBytes int64
	// TTL by run status; zero fields take DefaultTTL's.
	TTL TTL
	// Checkpoints keeps the checkpoints the cache writes and rebuilds
	// from, usually the store Reader reads; nil keeps none.
	Checkpoints store.Checkpointer
	// CheckpointEvery writes a checkpoint when a fold crosses a multiple of
	// this many events; 0 writes none and reads none (DefaultCheckpointEvery
	// is the server's default).
	CheckpointEvery int
	// CheckpointQueue bounds the checkpoints waiting to be written; when it
	// is full a checkpoint is skipped, never waited for. Default 64.
	CheckpointQueue int
	// PageSize is how many events one store read returns; default 1000.
	PageSize int
	// Now is the clock of the TTLs; default time.Now.
	Now func() time.Time
	// Logger receives checkpoint failures.
	Logger zerolog.Logger
}

// Defaults of Options.
const (
	DefaultMaxEntries      = 1000
	DefaultMaxBytes        = 100 << 20
	DefaultCheckpointEvery = 1000
	DefaultCheckpointQueue = 64
	DefaultPageSize        = 1000
)

// checkpointTimeout bounds one checkpoint write, so a stalled store cannot
// hold the writer (and Close) for long.
const checkpointTimeout = 5 * time.Second

// Stats are the cache's counters since New, ready to be exported as metrics.
type Stats struct {
	Hits        uint64 // reads answered from a cached state, with or without a tail fold
	Misses      uint64 // reads that rebuilt a state from a checkpoint or the start
	Evictions   uint64 // entries dropped to stay within MaxEntries or MaxBytes
	Expirations uint64 // entries dropped because their TTL passed
	Entries     int    // contexts cached now
	Bytes       int64  // their estimated size now

	TailEvents    uint64        // events folded onto cached states
	RebuildEvents uint64        // events folded by rebuilds
	FoldTime      time.Duration // time spent folding, reads from the store excluded

	CheckpointsWritten  uint64 // checkpoints stored
	CheckpointsSkipped  uint64 // checkpoints dropped because the queue was full
	CheckpointsFailed   uint64 // checkpoint writes the store refused
	CheckpointsRejected uint64 // stored checkpoints that could not be decoded and were folded around
}

// Cache is the snapshot cache. It is safe for concurrent use.
type Cache struct {
	store Reader
	cp    store.Checkpointer // nil when the store keeps none or they are off
	opts  Options
	log   zerolog.Logger

	mu    sync.Mutex
	lru   *simplelru.LRU[store.Context, *entry]
	bytes int64

	hits, misses, evictions, expirations      atomic.Uint64
	tailEvents, rebuildEvents                 atomic.Uint64
	foldNanos                                 atomic.Int64
	cpWritten, cpSkipped, cpFailed, cpRejects atomic.Uint64

	jobs      chan checkpointJob
	quit      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// entry is one cached context. Entries are never changed once stored; an
// update stores a new one.
type entry struct {
	state reducers.State
	// prev is the state this one replaced. A reader that took the stream's
	// position just before someone else advanced the cache past it folds
	// from prev instead of rebuilding.
	prev    reducers.State
	size    int64
	expires time.Time
}

type checkpointJob struct {
	c     store.Context
	state reducers.State
}

// New returns a cache over st. Close it before closing st.
func New(st Reader, opts Options) *Cache {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	opts.TTL.Active = orDefault(opts.TTL.Active, DefaultTTL.Active)
	opts.TTL.Completed = orDefault(opts.TTL.Completed, DefaultTTL.Completed)
	opts.TTL.Failed = orDefault(opts.TTL.Failed, DefaultTTL.Failed)
	if opts.CheckpointQueue <= 0 {
		opts.CheckpointQueue = DefaultCheckpointQueue
	}
	if opts.PageSize <= 0 {
		opts.PageSize = DefaultPageSize
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	c := &Cache{
		store: st,
		opts:  opts,
		log:   opts.Logger,
		jobs:  make(chan checkpointJob, opts.CheckpointQueue),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	if opts.CheckpointEvery > 0 {
		c.cp = opts.Checkpoints
	}
	// The callback runs under mu, from Add, Remove and RemoveOldest alike, so
	// it keeps the byte count and nothing else.
	c.lru, _ = simplelru.NewLRU(opts.MaxEntries, func(_ store.Context, e *entry) { c.bytes -= e.size })
	go c.writeCheckpoints()
	return c
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Close stops the checkpoint writer after the checkpoints already queued. The
// cache still answers reads afterwards, without writing checkpoints.
func (c *Cache) Close() error {
	c.closeOnce.Do(func() {
		close(c.quit)
		<-c.done
	})
	return nil
}

// State returns c's newest state. It reads the events after the cached
// position, so it holds every event the store had when State was called.
// Errors: the store's.
func (c *Cache) State(ctx context.Context, sc store.Context) (reducers.State, error) {
	return c.StateAt(ctx, sc, event.MaxID)
}

// StateJSON is State in its JSON form with its position, the shape the SSE
// handler's reset message takes.
func (c *Cache) StateJSON(ctx context.Context, sc store.Context) (json.RawMessage, event.ID, error) {
	s, err := c.State(ctx, sc)
	if err != nil {
		return nil, event.ID{}, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, event.ID{}, fmt.Errorf("snapshots: marshal state of %s: %w", sc, err)
	}
	return b, s.Position(), nil
}

// StateAt returns the fold of c's events with ids up to and including at:
// time travel to at. event.MaxID means every event, as State. It starts from
// the cached state when that is not past at, and otherwise from the nearest
// checkpoint at or before at. Errors: the store's.
func (c *Cache) StateAt(ctx context.Context, sc store.Context, at event.ID) (reducers.State, error) {
	r := reducers.For(sc.Type)
	if at.IsZero() {
		return r.Init(), nil
	}
	if base := c.cachedAtOrBefore(sc, at); base != nil {
		c.hits.Add(1)
		if base.Position() == at {
			return base, nil
		}
		s, n, err := c.fold(ctx, sc, r, base, at)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			c.tailEvents.Add(uint64(n))
			c.put(sc, s)
			c.checkpointIfDue(sc, base, s)
		}
		return s, nil
	}
	c.misses.Add(1)
	s, err := c.rebuild(ctx, sc, r, at)
	if err != nil {
		return nil, err
	}
	c.put(sc, s)
	return s, nil
}

// Stats returns the counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	entries, bytes := c.lru.Len(), c.bytes
	c.mu.Unlock()
	return Stats{
		Hits: c.hits.Load(), Misses: c.misses.Load(),
		Evictions: c.evictions.Load(), Expirations: c.expirations.Load(),
		Entries: entries, Bytes: bytes,
		TailEvents: c.tailEvents.Load(), RebuildEvents: c.rebuildEvents.Load(),
		FoldTime:           time.Duration(c.foldNanos.Load()),
		CheckpointsWritten: c.cpWritten.Load(), CheckpointsSkipped: c.cpSkipped.Load(),
		CheckpointsFailed: c.cpFailed.Load(), CheckpointsRejected: c.cpRejects.Load(),
	}
}

// cachedAtOrBefore returns the newest cached state of sc whose position is not
// past at, or nil.
func (c *Cache) cachedAtOrBefore(sc store.Context, at event.ID) reducers.State {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lru.Get(sc)
	if !ok {
		return nil
	}
	if c.opts.Now().After(e.expires) {
		c.lru.Remove(sc)
		c.expirations.Add(1)
		return nil
	}
	switch {
	case e.state.Position().Compare(at) <= 0:
		return e.state
	case e.prev != nil && e.prev.Position().Compare(at) <= 0:
		return e.prev
	}
	return nil
}

// put caches s unless the cache holds a newer state of sc already; an older
// state is as true, but extending it would only repeat work. A context
// without events is not cached, so requests for unknown ids cannot crowd out
// real contexts.
func (c *Cache) put(sc store.Context, s reducers.State) {
	if s.Count() == 0 {
		return
	}
	size := int64(reducers.ApproxSize(s))
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var prev reducers.State
	if old, ok := c.lru.Peek(sc); ok {
		if old.state.Position().Compare(s.Position()) >= 0 && !now.After(old.expires) {
			return
		}
		// Add replaces an entry without the eviction callback.
		c.bytes -= old.size
		prev = old.state
	}
	if size > c.opts.MaxBytes {
		c.lru.Remove(sc)
		return
	}
	e := &entry{state: s, prev: prev, size: size, expires: now.Add(c.ttl(s))}
	c.bytes += size
	if c.lru.Add(sc, e) {
		c.evictions.Add(1)
	}
	for c.bytes > c.opts.MaxBytes {
		if _, _, ok := c.lru.RemoveOldest(); !ok {
			break
		}
		c.evictions.Add(1)
	}
}

func (c *Cache) ttl(s reducers.State) time.Duration {
	switch st := s.(type) {
	case *reducers.FlowState:
		switch st.Status {
		case reducers.FlowCompleted, reducers.FlowCancelled:
			return c.opts.TTL.Completed
		case reducers.FlowFailed:
			return c.opts.TTL.Failed
		}
	case *reducers.TriggerState:
		switch st.Status {
		case reducers.TriggerFired, reducers.TriggerCancelled:
			return c.opts.TTL.Completed
		case reducers.TriggerTimeout:
			return c.opts.TTL.Failed
		}
	}
	return c.opts.TTL.Active
}

// rebuild folds sc's state at at from the nearest usable checkpoint, or from
// the start.
func (c *Cache) rebuild(ctx context.Context, sc store.Context, r reducers.Reducer, at event.ID) (reducers.State, error) {
	base := r.Init()
	if c.cp != nil {
		cpAt, b, err := c.cp.Checkpoint(ctx, sc, at)
		switch {
		case err == nil:
			s, derr := reducers.UnmarshalCheckpoint(r, b)
			if derr == nil && s.Position() != cpAt {
				derr = fmt.Errorf("stored at %s, holds %s", cpAt, s.Position())
			}
			if derr != nil {
				// A checkpoint of an older reducer version, or damaged:
				// folding from the start is slower but right.
				c.cpRejects.Add(1)
				c.log.Warn().Err(derr).Str("context", sc.String()).Msg("checkpoint not used")
				break
			}
			base = s
		case !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
	}
	s, n, err := c.fold(ctx, sc, r, base, at)
	if err != nil {
		return nil, err
	}
	c.rebuildEvents.Add(uint64(n))
	c.checkpointIfDue(sc, base, s)
	return s, nil
}

// fold extends s with sc's events after its position through at, a page at a
// time, and reports how many it folded. While one page is folded the next is
// read, so a long rebuild takes about the longer of reading and folding
// rather than their sum.
func (c *Cache) fold(ctx context.Context, sc store.Context, r reducers.Reducer, s reducers.State, at event.ID) (reducers.State, int, error) {
	q := store.RangeQuery{After: s.Position(), Limit: c.opts.PageSize}
	if at != event.MaxID {
		q.Through = at
	}
	evs, err := c.store.Range(ctx, sc, q)
	n := 0
	for {
		if err != nil {
			return nil, 0, err
		}
		var next <-chan page
		if len(evs) == c.opts.PageSize {
			q.After = evs[len(evs)-1].ID
			next = c.readPage(ctx, sc, q)
		}
		if len(evs) > 0 {
			start := time.Now()
			s, err = r.Fold(s, evs)
			c.foldNanos.Add(int64(time.Since(start)))
			if err != nil {
				if next != nil {
					<-next
				}
				return nil, 0, fmt.Errorf("snapshots: fold %s: %w", sc, err)
			}
			n += len(evs)
		}
		if next == nil {
			return s, n, nil
		}
		p := <-next
		evs, err = p.evs, p.err
	}
}

// page is one store read.
type page struct {
	evs []event.Event
	err error
}

// readPage reads one page in the background; the channel holds its result,
// so the reader never waits for the caller.
func (c *Cache) readPage(ctx context.Context, sc store.Context, q store.RangeQuery) <-chan page {
	ch := make(chan page, 1)
	go func() {
		evs, err := c.store.Range(ctx, sc, q)
		ch <- page{evs, err}
	}()
	return ch
}

// checkpointIfDue queues a checkpoint of to when folding from from to it
// crossed a multiple of CheckpointEvery events.
func (c *Cache) checkpointIfDue(sc store.Context, from, to reducers.State) {
	if c.cp == nil || to.Count()/c.opts.CheckpointEvery == from.Count()/c.opts.CheckpointEvery {
		return
	}
	select {
	case <-c.quit:
		return
	default:
	}
	select {
	case c.jobs <- checkpointJob{c: sc, state: to}:
	default:
		c.cpSkipped.Add(1)
	}
}

// writeCheckpoints is the one goroutine that writes checkpoints, so readers
// never wait for one.
func (c *Cache) writeCheckpoints() {
	defer close(c.done)
	for {
		select {
		case j := <-c.jobs:
			c.writeCheckpoint(j)
		case <-c.quit:
			for {
				select {
				case j := <-c.jobs:
					c.writeCheckpoint(j)
				default:
					return
				}
			}
		}
	}
}

func (c *Cache) writeCheckpoint(j checkpointJob) {
	b, err := reducers.MarshalCheckpoint(j.state)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), checkpointTimeout)
		err = c.cp.PutCheckpoint(ctx, j.c, j.state.Position(), b)
		cancel()
	}
	if err != nil {
		c.cpFailed.Add(1)
		c.log.Warn().Err(err).Str("context", j.c.String()).Msg("checkpoint not written")
		return
	}
	c.cpWritten.Add(1)
}
