// Package pgstore is nqd's PostgreSQL store: every context's stream, the
// indexes and the idempotency records live in tables of one schema (see
// migrations/), and live subscriptions are fed by LISTEN/NOTIFY. Several nqd
// instances may share one database.
//
// An append takes a row lock on its context's row of nqd_streams, so appends
// to one context are serialized and its ids stay monotonic, while appends to
// other contexts run alongside. Ids are `<ms>-<seq>` read from the database
// clock. The events, the indexes, the idempotency record and the notification
// are one transaction; the notification, delivered on commit, carries the
// context and the last id, never bodies, and every subscriber reads what it
// has not seen from the table, so a lost notification delays an event but
// never loses it.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/store"
)

var (
	_ store.Store        = (*Store)(nil)
	_ store.Checkpointer = (*Store)(nil)
)

// Options tune a Store. The zero value is usable.
type Options struct {
	// IdempotencyWindow is how long an idempotency key is remembered;
	// default store.DefaultIdempotencyWindow.
	IdempotencyWindow time.Duration
	// SubscriptionBuffer is the channel size of a subscription that asks for
	// none; default store.DefaultSubscriptionBuffer.
	SubscriptionBuffer int
	// Logger receives the store's diagnostics; the zero value discards them.
	Logger zerolog.Logger
	// Retention sets when finished runs become due for the reaper; the
	// zero value keeps every run.
	Retention store.Retention
	// KindWindow is how long the kind index keeps an event; default
	// store.DefaultKindWindow.
	KindWindow time.Duration
	// Appended, when set, is told how many events each write stored (a
	// replay stores none), for the appended-events metric. It must return
	// quickly.
	Appended func(events int)
}

const (
	// keepCheckpoints is how many checkpoints a context keeps.
	keepCheckpoints = 4
	// defaultMaxConns is the pool size unless the URL sets pool_max_conns.
	defaultMaxConns   = 16
	maxIdempotencyKey = store.MaxIdempotencyKey
)

var _ store.Backend = (*Store)(nil)

// Store is a store.Backend on PostgreSQL. It is safe for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	opts    Options
	log     zerolog.Logger
	channel string // the NOTIFY channel of this schema
	schema  string

	feed *feed

	closeOnce sync.Once
	closed    chan struct{}
}

// Open connects to the database at url (a postgres:// URL or DSN as pgx reads
// it, TLS options included), applies the schema migrations the database
// lacks and starts the listener that feeds subscriptions. The tables live in
// the first schema of the URL's search_path.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if opts.IdempotencyWindow <= 0 {
		opts.IdempotencyWindow = store.DefaultIdempotencyWindow
	}
	if opts.SubscriptionBuffer <= 0 {
		opts.SubscriptionBuffer = store.DefaultSubscriptionBuffer
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w: %w", store.ErrInvalid, err)
	}
	// pgx's default pool (four connections on a small machine) makes the
	// engine's claims, the appends and the subscribers' reads queue for a
	// connection; a URL that names pool_max_conns keeps its own.
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = defaultMaxConns
	}
	cfg.ShouldPing = shouldPing
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w: %w", store.ErrUnavailable, err)
	}
	s := &Store{pool: pool, opts: opts, log: opts.Logger, closed: make(chan struct{})}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&s.schema); err != nil {
		pool.Close()
		return nil, dbErr(err)
	}
	s.channel = channelName(s.schema)
	s.feed = newFeed(s, cfg.ConnConfig.Copy())
	if err := s.feed.start(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// channelName is the NOTIFY channel of schema. Channels are per database;
// naming this schema's keeps stores of other schemas on the same database
// from waking each other. A name must stay under PostgreSQL's 64-byte
// identifier limit, so a long schema name is replaced by its hash.
func channelName(schema string) string {
	name := "nqd_events." + schema
	if len(name) < 64 {
		return name
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(schema))
	return fmt.Sprintf("nqd_events.%x", h.Sum64())
}

// Ping checks that the database answers. Errors: ErrUnavailable, ErrClosed.
func (s *Store) Ping(ctx context.Context) error {
	if s.isClosed() {
		return errClosed
	}
	return dbErr(s.pool.Ping(ctx))
}

// Features: UpdateRun checks the definition an update was decided on, in
// the update's own transaction; a definition stored meanwhile by a
// transaction that commits before the update's is not seen, which orders
// the start before that store (the store reads no run). The live feed is
// not reliable: a notification lost while the listener reconnects is not
// redelivered, so subscribers check what they receive against the stream.
// A run update neither claims nor enqueues a job claimed.
func (s *Store) Features() store.Features {
	return store.Features{ChecksDefinitions: true}
}

// LiveHealthy reports whether the live feed is listening. A readiness probe
// calls it so an instance whose listener is down stops taking SSE clients
// (its subscribers would only catch up once it is back). Errors:
// ErrUnavailable, ErrClosed.
func (s *Store) LiveHealthy(ctx context.Context) error {
	if s.isClosed() {
		return errClosed
	}
	if !s.feed.listening.Load() {
		return fmt.Errorf("pgstore: live: %w: the listener is reconnecting", store.ErrUnavailable)
	}
	return ctx.Err()
}

// Close ends every subscription with ErrClosed, stops the listener and closes
// the pool. Calling it again does nothing.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.feed.stop()
		s.pool.Close()
	})
	return nil
}

func (s *Store) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// errClosed is what every operation on a closed store, and every subscription
// it ended, reports.
var errClosed = fmt.Errorf("pgstore: %w", store.ErrClosed)

// dbErr translates a pgx failure into the store's sentinels. Errors that
// carry a sentinel or a context error pass through unchanged.
func dbErr(err error) error {
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrInvalid), errors.Is(err, store.ErrClosed),
		errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound),
		errors.Is(err, store.ErrUnavailable):
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("pgstore: %w", store.ErrNotFound)
	case errors.As(err, &pgErr) && pgErr.Code == "22021":
		// invalid byte sequence: text that PostgreSQL cannot store.
		return fmt.Errorf("pgstore: %w: %w", store.ErrInvalid, err)
	default:
		return fmt.Errorf("pgstore: %w: %w", store.ErrUnavailable, err)
	}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("pgstore: %w: %s", store.ErrInvalid, fmt.Sprintf(format, args...))
}

func checkContext(c store.Context) error {
	if !c.Valid() {
		return invalid("context %q", c.String())
	}
	return nil
}

// ready reports why an operation cannot start: the store is closed or ctx
// is done.
func (s *Store) ready(ctx context.Context) error {
	if s.isClosed() {
		return errClosed
	}
	return ctx.Err()
}
