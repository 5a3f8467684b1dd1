// Package registry keeps the worker registry: which worker processes serve
// which queues, with what concurrency, SDK and version, and how busy they are.
// The registry is events, like everything else nqd keeps: a worker's arrival
// (worker.registered), its heartbeat with its in-flight count
// (worker.heartbeat, at most one per worker per Interval across all
// instances) and its departure (worker.left, with a reason) are appended to
// one stream, `<prefix>:registry:workers` (Stream). Each event carries the
// whole worker record, so folding any suffix of the stream gives every
// worker seen in it; that is what lets the stream be trimmed by age.
//
// Beside the stream, each live worker has a KV record (`nqd.worker.<id>`)
// that every instance shares: it says when the worker was last seen and when
// its last heartbeat event was written, so that instances coalesce their
// heartbeats through a compare-and-swap and exactly one of them marks a
// silent worker lost.
package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/reducers"
	"github.com/nqd-dev/nqd/store"
)

// Stream is the registry's context: its events are the stream
// `<prefix>:registry:workers`.
var Stream = store.Context{Type: "registry", ID: "workers"}

// The registry's event kinds.
const (
	KindRegistered = reducers.KindWorkerRegistered
	KindHeartbeat  = reducers.KindWorkerHeartbeat
	KindLeft       = reducers.KindWorkerLeft
)

// Transports a worker reaches nqd by.
const (
	TransportChannel = "channel"
	TransportHTTP    = "http"
)

// Reasons a worker left.
const (
	// ReasonClosed: the worker said goodbye or closed its channel.
	ReasonClosed = "closed"
	// ReasonLost: the worker was not seen for LostAfter.
	ReasonLost = reducers.WorkerLost
)

// Defaults of Options.
const (
	DefaultInterval = 15 * time.Second
	// DefaultLostAfter is how long a worker may go unseen before it is
	// marked lost. An HTTP worker's claim long-polls for up to 30 s, and
	// its KV record is written at the first call an Interval after the last
	// write: an idle worker's record can be 45 s old, so 60 s.
	DefaultLostAfter = 60 * time.Second
	DefaultRetain    = time.Hour
	// DefaultMaxWorkers bounds the workers one instance keeps in memory.
	DefaultMaxWorkers = 10000
)

// Limits of a hello's fields.
const (
	maxIDLen    = 100 // the KV key `nqd.worker.<id>` stays within its 128 bytes
	maxTextLen  = 128
	maxQueues   = 32
	maxReason   = 64
	maxInFlight = 1 << 20
	// MaxConcurrency bounds a worker's declared concurrency.
	MaxConcurrency = 100000
)

// kvPrefix starts every worker's KV record key: nqd's own, which the
// public KV routes cannot write.
const kvPrefix = store.ReservedKVPrefix + "worker."

// Hello is what a worker says of itself when it arrives.
type Hello struct {
	// ID names the worker process; it follows the name rule of
	// event/names.go and is at most 100 bytes.
	ID      string   `json:"id"`
	Name    string   `json:"name,omitempty"`
	SDK     string   `json:"sdk,omitempty"`
	Version string   `json:"version,omitempty"`
	Host    string   `json:"host,omitempty"`
	Queues  []string `json:"queues"`
	// Concurrency is how many jobs the worker runs at once; 0 when it does
	// not say.
	Concurrency int `json:"concurrency"`
	// Transport is TransportChannel or TransportHTTP.
	Transport string `json:"transport"`
}

// Record is what every registry event carries: the worker's hello, when it
// was first seen and its in-flight count; on worker.left, why it left.
type Record struct {
	Hello
	FirstSeen int64 `json:"firstSeen"` // epoch ms
	// LastSeen, on worker.left, is when the worker was last seen (epoch
	// ms): for a lost worker, well before the event.
	LastSeen int64  `json:"lastSeen,omitempty"`
	InFlight int    `json:"inFlight"`
	Reason   string `json:"reason,omitempty"`
}

// Store is what the registry needs of the event store.
type Store interface {
	Append(ctx context.Context, c store.Context, evs []event.Event, opts store.AppendOptions) (store.AppendResult, error)
	Trim(ctx context.Context, c store.Context, before event.ID) (int64, error)
}

// KV is what the registry needs of the shared KV store.
type KV interface {
	Get(ctx context.Context, key string) (store.Record, error)
	Put(ctx context.Context, key string, fields map[string]string, ttl time.Duration) (int64, error)
	Delete(ctx context.Context, key string) error
	SetFields(ctx context.Context, key string, fields map[string]string) (int64, error)
	CompareAndSwap(ctx context.Context, key string, cond store.Condition, set map[string]string) (int64, error)
	Scan(ctx context.Context, q store.ScanQuery) ([]store.KVEntry, error)
}

// Options tune a Registry. Zero fields take the defaults.
type Options struct {
	// Interval is the heartbeat interval: a worker's heartbeat event is
	// written at most once per Interval, and the sweep runs every Interval.
	Interval time.Duration
	// LostAfter is how long a worker may go unseen before it is marked
	// lost.
	LostAfter time.Duration
	// Retain is how long the registry stream keeps its events; older ones
	// are trimmed by the sweep.
	Retain time.Duration
	// MaxWorkers bounds the workers one instance tracks at once.
	MaxWorkers int
	Now        func() time.Time
	Log        zerolog.Logger
}

// Registry tracks the workers connected to this instance and shares what it
// knows through the store. It is safe for concurrent use.
type Registry struct {
	store Store
	kv    KV
	opts  Options

	mu    sync.Mutex
	local map[string]*local
}

// local is what this instance knows of a worker it has seen.
type local struct {
	hello    Hello
	inFlight int
	seen     time.Time // last call
	synced   time.Time // last KV write
}

// New returns a registry over st and kv.
func New(st Store, kv KV, opts Options) *Registry {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.LostAfter <= 0 {
		opts.LostAfter = DefaultLostAfter
	}
	if opts.Retain <= 0 {
		opts.Retain = DefaultRetain
	}
	if opts.MaxWorkers <= 0 {
		opts.MaxWorkers = DefaultMaxWorkers
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Registry{store: st, kv: kv, opts: opts, local: make(map[string]*local)}
}

// Interval is the registry's heartbeat interval.
func (r *Registry) Interval() time.Duration { return r.opts.Interval }

// LostAfter is how long a worker may go unseen before it is marked lost.
func (r *Registry) LostAfter() time.Duration { return r.opts.LostAfter }

// StaleAfter is how long after its last registry event an active worker
// is shown lost though no departure was written: LostAfter, plus the
// Interval a heartbeat event may lag behind the worker's last call.
func (r *Registry) StaleAfter() time.Duration { return StaleAfter(r.opts.Interval, r.opts.LostAfter) }

// StaleAfter is Registry.StaleAfter for an interval and a lost timeout, the
// defaults when zero.
func StaleAfter(interval, lostAfter time.Duration) time.Duration {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if lostAfter <= 0 {
		lostAfter = DefaultLostAfter
	}
	return lostAfter + interval
}

// errTooMany refuses a worker beyond MaxWorkers.
var errTooMany = &nqd.Error{Code: nqd.CodeUnavailable,
	Message: "This nqd instance tracks as many workers as it may; connect to another instance or retry later."}

// Arrive records a worker's hello: the first hello of a worker writes
// worker.registered; a hello of a worker already registered (a reconnect,
// or another instance's) updates its record and writes nothing. Errors: a
// validation *nqd.Error for a bad hello, the store's.
func (r *Registry) Arrive(ctx context.Context, h Hello) error { return r.arrive(ctx, h, -1) }

// arrive is Arrive with the worker's in-flight count, when not negative.
func (r *Registry) arrive(ctx context.Context, h Hello, inFlight int) error {
	if err := Check(h); err != nil {
		return err
	}
	now := r.opts.Now()
	r.mu.Lock()
	l, ok := r.local[h.ID]
	if !ok {
		if len(r.local) >= r.opts.MaxWorkers {
			r.mu.Unlock()
			return errTooMany
		}
		l = &local{}
		r.local[h.ID] = l
	}
	l.hello, l.seen, l.synced = h, now, now
	if inFlight >= 0 {
		l.inFlight = min(inFlight, maxInFlight)
	}
	inFlight = l.inFlight
	r.mu.Unlock()
	return r.register(ctx, h, inFlight, now)
}

// register writes h's KV record and, unless the worker is registered
// already, its worker.registered event.
func (r *Registry) register(ctx context.Context, h Hello, inFlight int, now time.Time) error {
	key := kvPrefix + h.ID
	rec, err := r.kv.Get(ctx, key)
	switch {
	case err == nil && rec.Fields["status"] == statusActive:
		fields := helloFields(h)
		fields["seen"] = ms(now)
		_, err = r.kv.SetFields(ctx, key, fields)
		return err
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return err
	}
	fields := helloFields(h)
	fields["status"] = statusActive
	fields["first"], fields["seen"], fields["beat"] = ms(now), ms(now), ms(now)
	fields["inFlight"] = strconv.Itoa(inFlight)
	if _, err := r.kv.Put(ctx, key, fields, 0); err != nil {
		return err
	}
	return r.append(ctx, KindRegistered, Record{Hello: h, FirstSeen: now.UnixMilli(), InFlight: inFlight}, "")
}

// Beat records that worker id, which arrived on this instance, is alive
// with inFlight jobs running (a negative inFlight keeps the last count). It
// writes to the store at most once per Interval per worker: a heartbeat
// event when no instance has written one for this worker within the
// Interval. Errors: store.ErrNotFound when the worker has not arrived here,
// the store's.
func (r *Registry) Beat(ctx context.Context, id string, inFlight int) error {
	now := r.opts.Now()
	r.mu.Lock()
	l, ok := r.local[id]
	if !ok {
		r.mu.Unlock()
		return fmt.Errorf("worker %q: %w", id, store.ErrNotFound)
	}
	l.seen = now
	if inFlight >= 0 {
		l.inFlight = min(inFlight, maxInFlight)
	}
	due := now.Sub(l.synced) >= r.opts.Interval
	if due {
		l.synced = now
	}
	h, n := l.hello, l.inFlight
	r.mu.Unlock()
	if !due {
		return nil
	}
	return r.sync(ctx, h, n, now)
}

// Seen records a claim of a worker that speaks the HTTP protocol: it
// arrives on its first claim to this instance, or when its hello changed,
// and beats on the others.
func (r *Registry) Seen(ctx context.Context, h Hello, inFlight int) error {
	r.mu.Lock()
	l, ok := r.local[h.ID]
	same := ok && sameHello(l.hello, h)
	r.mu.Unlock()
	if !same {
		return r.arrive(ctx, h, inFlight)
	}
	return r.Beat(ctx, h.ID, inFlight)
}

// sync writes what this instance knows of a worker to its KV record and,
// when no instance has within the Interval, a heartbeat event.
func (r *Registry) sync(ctx context.Context, h Hello, inFlight int, now time.Time) error {
	key := kvPrefix + h.ID
	rec, err := r.kv.Get(ctx, key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if err != nil || rec.Fields["status"] != statusActive {
		// Its departure was written. If it left here meanwhile (Leave
		// forgets it), this beat is late and changes nothing; otherwise
		// another instance found it silent while it was alive, and it
		// arrives again.
		r.mu.Lock()
		_, here := r.local[h.ID]
		r.mu.Unlock()
		if !here {
			return nil
		}
		return r.register(ctx, h, inFlight, now)
	}
	set := map[string]string{"seen": ms(now), "inFlight": strconv.Itoa(inFlight)}
	beat, _ := strconv.ParseInt(rec.Fields["beat"], 10, 64)
	if now.UnixMilli()-beat < r.opts.Interval.Milliseconds() {
		_, err = r.kv.SetFields(ctx, key, set)
		return err
	}
	set["beat"] = ms(now)
	// On the version read: a departure decided meanwhile, or another
	// instance's heartbeat, makes this one lose.
	_, err = r.kv.CompareAndSwap(ctx, key, store.Condition{Version: rec.Version}, set)
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		// Another instance wrote this interval's heartbeat (or the record
		// went): ours would be one too many.
		return nil
	}
	if err != nil {
		return err
	}
	first, _ := strconv.ParseInt(rec.Fields["first"], 10, 64)
	return r.append(ctx, KindHeartbeat, Record{Hello: h, FirstSeen: first, InFlight: inFlight}, "")
}

// Leave records that worker id left for reason (ReasonClosed when a channel
// closes). Only the first departure of a worker writes worker.left; leaving
// a worker that is not registered does nothing. Errors: a validation
// *nqd.Error for a bad id or reason, the store's.
func (r *Registry) Leave(ctx context.Context, id, reason string) error {
	if !validID(id) {
		return invalid("id", idRule)
	}
	if reason == "" || len(reason) > maxReason || !validText(reason) {
		return invalid("reason", "must be 1 to 64 bytes of printable text")
	}
	r.mu.Lock()
	delete(r.local, id)
	r.mu.Unlock()
	key := kvPrefix + id
	rec, err := r.kv.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return r.depart(ctx, key, rec, reason, store.Condition{Field: "status", Value: statusActive}, r.opts.Now())
}

// depart writes a worker's departure once: the instance whose
// compare-and-swap from cond wins appends worker.left, under an idempotency
// key naming the worker's stay so that a retry after a crash appends no
// second one, and then drops the record. A worker that is not lost was last
// seen now.
func (r *Registry) depart(ctx context.Context, key string, rec store.Record, reason string, cond store.Condition, now time.Time) error {
	if rec.Fields["status"] == statusActive {
		if _, err := r.kv.CompareAndSwap(ctx, key, cond, map[string]string{"status": statusLeaving, "reason": reason}); err != nil {
			if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
				return nil // another instance, or a newer call, decided
			}
			return err
		}
	} else if rec.Fields["reason"] != "" {
		reason = rec.Fields["reason"]
	}
	out := recordOf(rec.Fields)
	out.Reason = reason
	if reason != ReasonLost {
		out.LastSeen = now.UnixMilli()
	}
	if err := r.append(ctx, KindLeft, out, "left."+rec.Fields["first"]); err != nil {
		return err
	}
	if err := r.kv.Delete(ctx, key); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

// Statuses of a worker's KV record: active, or leaving between the
// compare-and-swap that decided its departure and the record's deletion.
const (
	statusActive  = "active"
	statusLeaving = "leaving"
)

// Sweep marks lost the workers no instance has seen for LostAfter, finishes
// departures a crash interrupted, forgets this instance's silent workers
// and trims registry events older than Retain. Every instance may sweep at
// once: each departure is written once.
func (r *Registry) Sweep(ctx context.Context) error {
	now := r.opts.Now()
	cutoff := now.Add(-r.LostAfter())
	r.mu.Lock()
	for id, l := range r.local {
		if !l.seen.After(cutoff) {
			delete(r.local, id)
		}
	}
	r.mu.Unlock()
	silent, err := r.kv.Scan(ctx, store.ScanQuery{Prefix: kvPrefix,
		Filter: &store.Filter{Field: "seen", Op: store.OpLt, Value: strconv.FormatInt(cutoff.UnixMilli()+1, 10)}})
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, e := range silent {
		cond := store.Condition{Version: e.Record.Version}
		if err := r.depart(ctx, e.Key, e.Record, ReasonLost, cond, now); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := r.store.Trim(ctx, Stream, event.IDAt(now.Add(-r.opts.Retain))); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Run sweeps every Interval until ctx ends.
func (r *Registry) Run(ctx context.Context) {
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := r.Sweep(ctx); err != nil && ctx.Err() == nil {
				r.opts.Log.Warn().Err(err).Msg("worker registry sweep failed")
			}
		}
	}
}

// StateReader reads reduced states, such as the snapshot cache.
type StateReader interface {
	StateAt(ctx context.Context, c store.Context, at event.ID) (reducers.State, error)
}

// State is the registry's state as of at (event.MaxID for now) in states.
func State(ctx context.Context, states StateReader, at event.ID) (*reducers.WorkersState, error) {
	s, err := states.StateAt(ctx, Stream, at)
	if err != nil {
		return nil, err
	}
	rs, ok := s.(*reducers.WorkersState)
	if !ok {
		return nil, fmt.Errorf("registry state: %w", reducers.ErrStateType)
	}
	return rs, nil
}

// append writes one registry event carrying rec.
func (r *Registry) append(ctx context.Context, kind string, rec Record, idemKey string) error {
	if rec.Queues == nil {
		rec.Queues = []string{}
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	opts := store.AppendOptions{}
	if idemKey != "" {
		opts.IdempotencyKey = "worker." + rec.ID + "." + idemKey
	}
	_, err = r.store.Append(ctx, Stream, []event.Event{{Kind: kind, Subject: Stream.ID, Data: data}}, opts)
	return err
}

// The rules a hello's fields follow, as a client is told them.
const (
	idRule        = "must match ^[A-Za-z0-9][A-Za-z0-9._~-]{0,99}$"
	textRule      = "must be at most 128 bytes of printable text"
	queueRule     = "must be at most 32 queue names, each matching ^[A-Za-z0-9][A-Za-z0-9._~-]{0,127}$"
	transportRule = "must be channel or http"
)

// Check reports the first field of h that breaks its rule, as a validation
// *nqd.Error.
func Check(h Hello) error {
	switch {
	case !validID(h.ID):
		return invalid("id", idRule)
	case !validText(h.Name):
		return invalid("name", textRule)
	case !validText(h.SDK):
		return invalid("sdk", textRule)
	case !validText(h.Version):
		return invalid("version", textRule)
	case !validText(h.Host):
		return invalid("host", textRule)
	case len(h.Queues) > maxQueues:
		return invalid("queues", queueRule)
	case h.Concurrency < 0 || h.Concurrency > MaxConcurrency:
		return invalid("concurrency", "must be between 0 and "+strconv.Itoa(MaxConcurrency))
	case h.Transport != TransportChannel && h.Transport != TransportHTTP:
		return invalid("transport", transportRule)
	}
	for _, q := range h.Queues {
		if !event.ValidName(q) {
			return invalid("queues", queueRule)
		}
	}
	return nil
}

func validID(id string) bool { return len(id) <= maxIDLen && event.ValidName(id) }

// validText allows what a name, version or host name holds and nothing that
// could break a log line or a header: printable characters, no control ones.
func validText(s string) bool {
	if len(s) > maxTextLen {
		return false
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f || c == '\uFFFD' {
			return false
		}
	}
	return true
}

func invalid(field, rule string) error {
	return &nqd.Error{Code: nqd.CodeValidation, Message: "The worker's hello breaks a rule.",
		Fields: map[string]string{field: rule}}
}

func sameHello(a, b Hello) bool {
	return a.ID == b.ID && a.Name == b.Name && a.SDK == b.SDK && a.Version == b.Version &&
		a.Host == b.Host && a.Concurrency == b.Concurrency && a.Transport == b.Transport &&
		strings.Join(a.Queues, ",") == strings.Join(b.Queues, ",")
}

// helloFields is h as KV fields; queue names cannot hold a comma.
func helloFields(h Hello) map[string]string {
	return map[string]string{
		"id": h.ID, "name": h.Name, "sdk": h.SDK, "version": h.Version, "host": h.Host,
		"queues": strings.Join(h.Queues, ","), "concurrency": strconv.Itoa(h.Concurrency),
		"transport": h.Transport,
	}
}

// recordOf reads a worker's KV record back.
func recordOf(f map[string]string) Record {
	var rec Record
	rec.ID, rec.Name, rec.SDK, rec.Version, rec.Host, rec.Transport =
		f["id"], f["name"], f["sdk"], f["version"], f["host"], f["transport"]
	if f["queues"] != "" {
		rec.Queues = strings.Split(f["queues"], ",")
	}
	rec.Concurrency, _ = strconv.Atoi(f["concurrency"])
	rec.InFlight, _ = strconv.Atoi(f["inFlight"])
	rec.FirstSeen, _ = strconv.ParseInt(f["first"], 10, 64)
	rec.LastSeen, _ = strconv.ParseInt(f["seen"], 10, 64)
	return rec
}

func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
