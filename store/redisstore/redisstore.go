// Package redisstore is the store.Store backend on Redis: one Redis Stream per
// context, published live over Pub/Sub, with sorted-set indexes. Several nqd
// instances may share one Redis; an event appended through any of them reaches
// the subscribers of all.
//
// Keys, under a configurable prefix <p> (default store.DefaultPrefix, "nq"):
//
//	<p>:<type>:<id>                    stream: the context's events, field "e" = the record without id and ts
//	<p>:<type>:<id>:live               Pub/Sub channel: each appended record, its full JSON (Event in openapi.yaml)
//	<p>:<type>s                        sorted set: context ids of a type, score = first event's ms
//	<p>:<type>s:<name>                 sorted set: a named index, e.g. <p>:flows:<flowName> (score = start ms)
//	<p>:<type>:<id>:idem:<sha256 hex>  string: "f<fingerprint> <id>...", what an append with an idempotency
//	                                  key stored, expires after the window; an append without one keeps a
//	                                  record under a random token for a minute (see Append)
//
// and for the flow engine (store.RunStore, store.DefinitionStore):
//
//	<p>:flows:<flow>:meta:<run>       hash: a run's record (store.RunMeta): status, startedAt, completedAt,
//	                                  stepCount, completedSteps, emittedEvents (JSON), version, and state
//	                                  (the engine's bookkeeping, JSON)
//	<p>:flows:<flow>:status:<status>  sorted set: the flow's runs with that status, score = startedAt
//	<p>:queue:<q>:ready               sorted set: job ids, score = when claimable (ready time, or lease
//	                                  end once claimed)
//	<p>:queue:<q>:jobs                hash: job id -> "<attempt> <score> <leaseUntil> <lease>\n<job JSON>"
//	<p>:engine:timers:due             sorted set: kind:flow:run:step, score = due ms
//	<p>:engine:kind:<kind>            stream: the events of kind appended with Append ("t" context type,
//	                                  "c" context id, "s" entry id, "e" body), trimmed to KindWindow;
//	                                  written only for watched kinds
//	<p>:engine:kinds:watched          set: the kinds the kind index records (WatchKinds)
//	<p>:engine:flows:defs             hash: flow name -> definition JSON; run_update.lua checks a start
//	                                  decided on a cached copy against it (store.RunUpdate.Definition)
//	<p>:engine:runs:expiring          sorted set: <flow>:<run> of finished runs, score = when retention
//	                                  ends (ms); written by run_update.lua, emptied by delete_run.lua
//	<p>:engine:secret:<name>          string: a secret nqd made for itself, such as the trigger key
//	                                  (Secret), written once by the first instance
//	<p>:engine:consumed:<kind>:<id>   string: an entry of the kind index consumed by an event await
//	<p>:engine:shards                 string: the number of shards the data was written with
//	                                  (CheckShards), under the one-shard prefix whatever the number
//	<p>:engine:claims:<digest>        list: queue position, job id, expired flag of each job a claim's
//	                                  lease took (digest: of the lease), until the lease ends
//	<p>:engine:updates:<token>        string: a run update's answer (MessagePack) under a random token
//	                                  for a minute (see UpdateRun)
//
// and for the KV state store (store.KV, see kv.go):
//
//	<p>:_kv:<key>                     hash: a record's fields and its version _v; PEXPIRE holds its TTL
//
// With Options.Shards above 1, <p> is one of the shards' hash tags
// {<prefix>:<k>}: each context and run, with every key its scripts touch,
// lives on the shard of its id (see shards.go).
//
// The engine's own keys have three parts after the prefix because two-part
// keys are context streams (<p>:<type>:<id>): a client appending to a
// context named like one of them could otherwise break it.
//
// Streams written by the Nuxt Queue Node module (fields type, runId, flowName,
// data, ts, stepName, stepId, attempt) are read as well.
//
// Every append is one Lua script (scripts/append.lua) that stores, publishes
// and indexes the batch atomically; every engine decision is one as well
// (scripts/run_update.lua: record, status index, events, jobs and timers),
// as are claims, heartbeats and timer pickups, and the restore of an
// archived run (scripts/restore.lua). Every key reaches a script
// through KEYS[]. Every name that becomes part of a key is
// checked against the name rules (event/names.go) before any command is sent.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Options tune a Store. The zero value is usable.
type Options struct {
	// Prefix starts every key; default store.DefaultPrefix. It is made of
	// names joined by ':' that pass event.ValidName.
	Prefix string
	// IdempotencyWindow is how long an idempotency key is remembered;
	// default store.DefaultIdempotencyWindow.
	IdempotencyWindow time.Duration
	// KindWindow is how long the kind index keeps an event; default
	// store.DefaultKindWindow.
	KindWindow time.Duration
	// MaxLen caps each stream approximately (XADD MAXLEN ~); 0 keeps every
	// event.
	MaxLen int64
	// MaxLenByType overrides MaxLen for the streams of a context type (0
	// keeps every event of that type).
	MaxLenByType map[string]int64
	// SubscriptionBuffer is the channel size of a subscription that asks for
	// none; default store.DefaultSubscriptionBuffer.
	SubscriptionBuffer int
	// LiveProbeInterval is how often the Pub/Sub connection is pinged so a
	// silently dead one is noticed; default 15s, negative disables.
	LiveProbeInterval time.Duration
	// Logger receives the live path's reconnects and undecodable entries.
	Logger zerolog.Logger
	// Retention sets when finished runs become due for the reaper; the
	// zero value keeps every run.
	Retention store.Retention
	// WaitReplicas, when above 0, acknowledges a write (every script that
	// writes: an append, a run update, a claim, a KV write...) only once that many
	// replicas have it (WAIT), so that a failover to one of them loses no
	// acknowledged write. A write that does not reach them within
	// WaitTimeout fails as one whose outcome is unknown.
	WaitReplicas int
	// WaitTimeout bounds the wait for replicas; default DefaultWaitTimeout.
	WaitTimeout time.Duration
	// Shards splits the keys over this many shards (see shards.go), each
	// its own hash slot on a Redis Cluster, so that a deployment's work
	// spreads over the cluster's primaries; 0 or 1 keeps one, the layout
	// nqd always had. Data written with one number is not found with
	// another: CheckShards refuses to start so.
	Shards int
	// Appended, when set, is told how many events each Append or
	// UpdateRun stored (a replay stores none), for the appended-events
	// metric: every write of events passes here, whoever makes it. It must
	// return quickly.
	Appended func(events int)
}

// DefaultWaitTimeout is how long a write waits for Options.WaitReplicas
// replicas unless told otherwise: a replica on a healthy network acknowledges
// within milliseconds, and a request's deadline must leave room for the
// retry that a failover takes.
const DefaultWaitTimeout = time.Second

const (
	defaultLiveProbeInterval = 15 * time.Second
	maxIdempotencyKey        = store.MaxIdempotencyKey
)

// Store is the Redis backend. It is safe for concurrent use.
type Store struct {
	client redis.UniversalClient
	opts   Options
	// shards hold the keys (see shards.go); with one, its prefix is
	// opts.Prefix, or on a Redis Cluster the hash tag {opts.Prefix}, which
	// puts every key in one slot.
	shards  []*shard
	rotate  atomic.Uint64 // where eachShard starts
	cluster bool
	scripts *scriptSet
	log     zerolog.Logger
	closed  atomic.Bool
}

var _ store.Backend = (*Store)(nil)

// New returns a Store on client. The caller keeps ownership of client and
// closes it after the Store. Errors: store.ErrInvalid for a bad prefix.
func New(client redis.UniversalClient, opts Options) (*Store, error) {
	if opts.Prefix == "" {
		opts.Prefix = store.DefaultPrefix
	}
	if !validPrefix(opts.Prefix) {
		return nil, fmt.Errorf("redisstore: prefix %q: %w", opts.Prefix, store.ErrInvalid)
	}
	if opts.IdempotencyWindow <= 0 {
		opts.IdempotencyWindow = store.DefaultIdempotencyWindow
	}
	if opts.MaxLen < 0 {
		return nil, fmt.Errorf("redisstore: negative MaxLen: %w", store.ErrInvalid)
	}
	for typ, n := range opts.MaxLenByType {
		if !event.ValidType(typ) || n < 0 {
			return nil, fmt.Errorf("redisstore: MaxLenByType %q=%d: %w", typ, n, store.ErrInvalid)
		}
	}
	if opts.WaitReplicas < 0 || opts.WaitTimeout < 0 {
		return nil, fmt.Errorf("redisstore: negative WaitReplicas or WaitTimeout: %w", store.ErrInvalid)
	}
	if opts.WaitTimeout == 0 {
		opts.WaitTimeout = DefaultWaitTimeout
	}
	if opts.SubscriptionBuffer <= 0 {
		opts.SubscriptionBuffer = store.DefaultSubscriptionBuffer
	}
	if opts.LiveProbeInterval == 0 {
		opts.LiveProbeInterval = defaultLiveProbeInterval
	}
	if opts.Shards < 0 || opts.Shards > MaxShards {
		return nil, fmt.Errorf("redisstore: %d shards, want 1 to %d: %w", opts.Shards, MaxShards, store.ErrInvalid)
	}
	s := &Store{client: client, opts: opts, log: opts.Logger}
	cc, cluster := client.(*redis.ClusterClient)
	prefix := opts.Prefix
	if cluster {
		s.cluster, prefix = true, "{"+opts.Prefix+"}"
	}
	s.scripts = scriptsFor(cluster, opts.Shards > 1)
	newPipe := func(tag string) *pipeliner {
		p := newPipeliner(client)
		p.waitReplicas, p.waitTimeout = opts.WaitReplicas, opts.WaitTimeout
		if cluster {
			p.node = func(ctx context.Context) (*redis.Client, error) { return cc.MasterForKey(ctx, tag) }
			p.reload = cc.ReloadState
		}
		return p
	}
	// On one server a pipeline and a Pub/Sub connection serve every shard;
	// on a cluster each shard's slot has its own primary.
	var pipe *pipeliner
	var feed *liveFeed
	tags := []string{prefix}
	if opts.Shards > 1 {
		tags = shardTags(opts.Prefix, opts.Shards)
	}
	for _, tag := range tags {
		sh := &shard{prefix: tag, pipe: pipe, feed: feed}
		if cluster || pipe == nil {
			sh.pipe = newPipe(tag)
			sh.feed = newLiveFeed(client, opts.LiveProbeInterval, s.log)
			if cluster {
				sh.feed.anchor = tag + ":engine:live"
			} else {
				pipe, feed = sh.pipe, sh.feed
			}
		}
		s.shards = append(s.shards, sh)
	}
	return s, nil
}

func validPrefix(p string) bool {
	for part := range strings.SplitSeq(p, ":") {
		if !event.ValidName(part) {
			return false
		}
	}
	return true
}

// Ping checks that Redis answers. Errors: store.ErrUnavailable.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("redisstore: ping: %w", store.ErrClosed)
	}
	return mapErr(ctx, "ping", s.client.Ping(ctx).Err())
}

// Features: a run update's script checks the definition it was decided on,
// claims in the same call, and may enqueue a job claimed (stored as
// claim.lua stores a claimed one). The live feed is not reliable: Redis
// Pub/Sub drops what it sends while the connection is down, so subscribers
// check what they receive against the stream.
//
// With several shards a run update neither checks the definition (the
// definitions live on one shard, the update on its run's) nor claims (it
// could claim from its run's shard only).
func (s *Store) Features() store.Features {
	one := len(s.shards) == 1
	return store.Features{ChecksDefinitions: one, ClaimsInUpdate: one, EnqueuesLeased: true}
}

// LiveHealthy checks the live path end to end: a PING travels over the shared
// Pub/Sub connection and its answer comes back through the receive loop. A
// readiness probe calls it so an instance whose live feed is dead stops
// taking SSE clients. Errors: store.ErrUnavailable, store.ErrClosed.
func (s *Store) LiveHealthy(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("redisstore: live: %w", store.ErrClosed)
	}
	for _, sh := range s.shards {
		if err := sh.feed.probe(ctx); err != nil {
			return err
		}
		if !s.cluster {
			break // one feed serves every shard
		}
	}
	return nil
}

// Close ends every subscription with store.ErrClosed, releases the Pub/Sub
// connection and stops sending script calls once the pipeline on its way is
// answered. It does not close the client. A second Close does nothing.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.closeShards()
	return nil
}

func (sh *shard) streamKey(c store.Context) string {
	return sh.prefix + ":" + c.Type + ":" + c.ID
}

func (sh *shard) channel(c store.Context) string { return sh.streamKey(c) + ":live" }

func (sh *shard) indexKey(ix store.Index) string {
	k := sh.prefix + ":" + ix.Type + "s"
	if ix.Name != "" {
		k += ":" + ix.Name
	}
	return k
}

func invalid(op, format string, args ...any) error {
	return fmt.Errorf("redisstore: %s: %s: %w", op, fmt.Sprintf(format, args...), store.ErrInvalid)
}

// mapErr translates a go-redis error at the package boundary: the caller's
// context errors pass through unchanged, redis.Nil is store.ErrNotFound, and
// anything that means Redis could not serve the command (network, pool,
// loading, read-only replica, out of memory) wraps store.ErrUnavailable.
func mapErr(ctx context.Context, op string, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, redis.Nil):
		return fmt.Errorf("redisstore: %s: %w", op, store.ErrNotFound)
	case isServerRefusal(err):
		return fmt.Errorf("redisstore: %s: %w: %w", op, store.ErrUnavailable, err)
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		// A reply error that is not a refusal is a bug or corrupt data
		// (WRONGTYPE, a script error): retrying elsewhere will not help.
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	// Anything else (EOF, a reset connection, a failed dial, a closed or
	// exhausted pool) means no working server answered. For a write that
	// may have run, use mapWriteErr.
	return fmt.Errorf("redisstore: %s: %w: %w", op, store.ErrUnavailable, err)
}

// mapWriteErr is mapErr for a write: a call that may have reached Redis
// and run before its connection broke is store.ErrOutcomeUnknown, not
// ErrUnavailable, which promises that nothing was written.
func mapWriteErr(ctx context.Context, op string, err error) error {
	if err != nil && ctx.Err() == nil && mayHaveRun(err) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("redisstore: %s: %w: %w", op, store.ErrOutcomeUnknown, err)
	}
	return mapErr(ctx, op, err)
}

func isServerRefusal(err error) bool {
	return redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsClusterDownError(err) || isRedirect(err) ||
		redis.IsTryAgainError(err) || redis.IsMasterDownError(err) || redis.IsMaxClientsError(err) ||
		redis.IsOOMError(err)
}
