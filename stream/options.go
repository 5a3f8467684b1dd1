package stream

import (
	"context"
	"encoding/json"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// StateFunc returns a context's reduced state as JSON and the id of the last
// event folded into it. It fills `event: reset` messages.
type StateFunc func(ctx context.Context, c store.Context) (json.RawMessage, event.ID, error)

// Hooks let tests act at points of a connection's life.
type Hooks struct {
	// AfterSubscribe runs once the connection's live feed is attached and
	// before its backfill is read.
	AfterSubscribe func()
}

// Defaults of Options that the server's configuration shares.
const (
	DefaultHeartbeat   = 15 * time.Second
	DefaultMaxBackfill = 10000
)

// Options configure a Handler. Zero values take the defaults noted.
type Options struct {
	Store  Source
	Prefix string // key prefix of raw-tail stream names; store.DefaultPrefix
	Log    zerolog.Logger

	Heartbeat    time.Duration // longest silence before a comment line; DefaultHeartbeat
	Retry        time.Duration // the `retry:` the browser waits before reconnecting; 2s
	WriteTimeout time.Duration // bound on one write to a client; 5s
	QueueEvents  int           // events a connection may have queued; 1000
	QueueBytes   int           // bytes a connection may have queued; 1 MiB
	MaxBackfill  int           // most events a backfill sends; DefaultMaxBackfill

	// MaxLifetime ends a connection after this long plus up to
	// LifetimeJitter (MaxLifetime/10 when zero), so that connections spread
	// over instances again; 0 keeps connections open.
	MaxLifetime    time.Duration
	LifetimeJitter time.Duration

	// DrainWindow spreads the closes of Drain; 5s, shortened to fit Drain's
	// context.
	DrainWindow time.Duration

	// CheckInterval is how often an active context's stream end is compared
	// with what arrived live; 500ms, negative disables.
	CheckInterval time.Duration

	// SubscribeBuffer is the store subscription buffer of one context; 256.
	// The hub drains it without waiting, and an overflow costs a resubscribe
	// and a read from the stream, not an event.
	SubscribeBuffer int

	// TrustLive says the store's live feed never skips an event without
	// ending the subscription (true of the embedded store, not of Redis
	// Pub/Sub). Otherwise a live event that does not provably follow the
	// previous one is checked against the stream, one read per batch.
	TrustLive bool

	// State fills `event: reset`; nil sends the position only.
	State StateFunc

	// Observer is told about connections and deliveries, for metrics;
	// nil observes nothing.
	Observer Observer

	Hooks Hooks
}

func (o *Options) defaults() {
	if o.Prefix == "" {
		o.Prefix = store.DefaultPrefix
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.Retry <= 0 {
		o.Retry = 2 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 5 * time.Second
	}
	if o.QueueEvents <= 0 {
		o.QueueEvents = 1000
	}
	if o.QueueBytes <= 0 {
		o.QueueBytes = 1 << 20
	}
	if o.MaxBackfill <= 0 {
		o.MaxBackfill = DefaultMaxBackfill
	}
	if o.MaxLifetime > 0 && o.LifetimeJitter <= 0 {
		o.LifetimeJitter = o.MaxLifetime / 10
	}
	if o.DrainWindow <= 0 {
		o.DrainWindow = 5 * time.Second
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
}
