// Package boltstore is nqd's embedded store: every context's stream, the
// indexes and the idempotency records live in one bbolt file, and live
// subscriptions are served in-process. It suits a single nqd instance; every
// acknowledged append is on disk.
//
// Layout of the file (all keys big-endian so byte order is numeric order):
//
//	streams/<type>:<id>/<ms><seq>        event.MarshalBody()
//	streams/<type>:<id>\x00              uint64 event count (see lengths.go)
//	index/<index>\x00m<member>           int64 score (see index.go)
//	index/<index>\x00n                   uint64 member count
//	index/<index>\x00o<^score><member>   (empty) the listing order
//	idem/<type>:<id>/<key>               expiry ms, then the 16-byte ids
//	idemexp/<expiry ms><type>:<id>\x00<key>
//	watched/<kind>                       empty: a kind the kind index records
//	kinds/<kind>/<ms><seq>               the kind index (see kinds.go)
//	consumed/<kind>/<ms><seq>            run id that consumed the entry
package boltstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/internal/fanout"
)

var _ store.Backend = (*Store)(nil)

// Options tune a Store. The zero value is usable.
type Options struct {
	// Now is the clock that stamps event ids; default time.Now. Ids of one
	// context never go backwards even if it does.
	Now func() time.Time
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
	// Appended, when set, is told how many events each Append or
	// UpdateRun stored (a replay stores none), for the appended-events
	// metric: every write of events passes here, whoever makes it. It must
	// return quickly.
	Appended func(events int)
}

const (
	// maxGroup bounds how many waiting appends share one commit (and fsync).
	maxGroup          = 256
	maxIdempotencyKey = store.MaxIdempotencyKey
	// sweepLimit bounds the expired idempotency records removed per commit,
	// so cleaning never makes one append slow.
	sweepLimit = 64
)

// appendFill is how full bbolt fills the pages it splits in a bucket whose
// new keys sort after its old ones: a stream's event ids, the kind index's
// and the idempotency expiries, and the streams bucket itself, whose
// contexts are mostly runs keyed by ids that grow with time. bbolt's default
// of half suits keys that land anywhere; at the end of a bucket that only
// grows, each split leaves a half-empty page that nothing fills again,
// which doubled the file and the pages each commit writes. Not all of a
// page: a small stream lives inside its leaf in the streams bucket and grows
// in place, and the slack lets a few such writes in without a split.
const appendFill = 0.9

// growing returns b with appendFill for this transaction's splits; nil
// stays nil.
func growing(b *bolt.Bucket) *bolt.Bucket {
	if b != nil {
		b.FillPercent = appendFill
	}
	return b
}

var (
	bStreams = []byte("streams")
	bLengths = []byte("lengths")
	bIndex   = []byte("index")
	bIdem    = []byte("idem")
	bIdemExp = []byte("idemexp")
)

// Store is a store.Backend on one bbolt file. It is safe for concurrent use.
type Store struct {
	db   *bolt.DB
	opts Options
	log  zerolog.Logger

	// Appends go through one writer goroutine: it commits waiting appends
	// together and publishes them in commit order.
	reqs       chan *appendReq
	quit       chan struct{}
	writerDone chan struct{}

	subs *fanout.Set

	closeOnce sync.Once
	closeErr  error
}

// Open opens or creates the store file at path. It fails if another process
// holds the file.
func Open(path string, opts Options) (*Store, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.IdempotencyWindow <= 0 {
		opts.IdempotencyWindow = store.DefaultIdempotencyWindow
	}
	if opts.SubscriptionBuffer <= 0 {
		opts.SubscriptionBuffer = store.DefaultSubscriptionBuffer
	}
	// The timeout turns a file locked by another process into an error
	// instead of a hang. The free-page list is not written with every
	// commit but rebuilt from the pages when the file is opened: each
	// commit then writes and syncs only the pages it changed, and the map
	// keeps finding free pages cheap as the file grows. Every commit is
	// still synced before it is acknowledged.
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:        time.Second,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		return nil, fmt.Errorf("boltstore: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bStreams, bLengths, bIndex, bIdem, bIdemExp} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = migrateIndexes(db)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("boltstore: init %s: %w", path, err), db.Close())
	}
	s := &Store{
		db:         db,
		opts:       opts,
		log:        opts.Logger,
		reqs:       make(chan *appendReq),
		quit:       make(chan struct{}),
		writerDone: make(chan struct{}),
		subs:       fanout.NewSet(opts.Logger, errClosed),
	}
	go s.writeLoop()
	return s, nil
}

// Ping reports whether the store is open. Errors: ErrUnavailable.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.View(func(*bolt.Tx) error { return nil }); err != nil {
		return fmt.Errorf("boltstore: %w: %w", store.ErrUnavailable, err)
	}
	return nil
}

// Features: the live feed is reliable, as subscriptions are served
// in-process and one that falls behind is ended with ErrOverflow, never
// skipped past silently; a run update claims in its own commit and may
// enqueue a job claimed. Definitions are not checked in the update: one
// instance has the only cache.
func (s *Store) Features() store.Features {
	return store.Features{LiveReliable: true, ClaimsInUpdate: true, EnqueuesLeased: true}
}

// LiveHealthy is always nil: the in-process feed has no connection to lose.
func (s *Store) LiveHealthy(context.Context) error { return nil }

// Close stops accepting appends, waits for the ones in flight, ends every
// subscription with ErrClosed and closes the file. Calling it again returns
// the first call's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.quit)
		<-s.writerDone

		s.subs.Close()

		if err := s.db.Close(); err != nil {
			s.closeErr = fmt.Errorf("boltstore: close: %w", err)
		}
	})
	return s.closeErr
}

// dbErr translates a bbolt failure into the store's sentinels; errors that
// already carry one pass through.
func dbErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrInvalid), errors.Is(err, store.ErrClosed):
		return err
	case errors.Is(err, bolterrors.ErrDatabaseNotOpen):
		return errClosed
	default:
		return fmt.Errorf("boltstore: %w: %w", store.ErrUnavailable, err)
	}
}

// errClosed is what every operation on a closed store, and every subscription
// it ended, reports.
var errClosed = fmt.Errorf("boltstore: %w", store.ErrClosed)

func invalid(format string, args ...any) error {
	return fmt.Errorf("boltstore: %w: %s", store.ErrInvalid, fmt.Sprintf(format, args...))
}

func checkContext(c store.Context) error {
	if !c.Valid() {
		return invalid("context %q", c.String())
	}
	return nil
}
