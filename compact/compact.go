// Package compact bounds the live history of long runs without a hard cliff:
// it checkpoints a context's reduced state at a point, archives the events up
// to that point as verified segments, and only then trims them from the live
// stream. Reader reads through to the segments, so time travel to any point
// before the trim still answers.
package compact

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/reducers"
	"github.com/nqd-dev/nqd/store"
)

// Store is what compaction needs of a backend.
type Store interface {
	Range(ctx context.Context, c store.Context, q store.RangeQuery) ([]event.Event, error)
	store.Checkpointer
	store.Trimmer
}

// Options tune a Compactor. Zero fields take the defaults.
type Options struct {
	// SegmentEvents is the most events one archive segment holds; it bounds
	// the memory of a compaction and how much a read-through decodes to
	// reach one event. Default 2000.
	SegmentEvents int
	// PageSize is how many events one store read returns; default 1000.
	PageSize int
}

// Defaults of Options.
const (
	DefaultSegmentEvents = 2000
	DefaultPageSize      = 1000
)

// Result is what one compaction did.
type Result struct {
	Checkpoint event.ID // the point compacted to: the last event archived
	Segments   int      // segments written
	Archived   int64    // events written to them
	Trimmed    int64    // events removed from the live stream
}

// Compactor compacts contexts. It is safe for concurrent use; it runs one
// compaction at a time, so two never archive the same events.
type Compactor struct {
	store  Store
	seg    Segments
	reader *Reader
	opts   Options
	mu     sync.Mutex
}

// New returns a compactor of st's streams into seg.
func New(st Store, seg Segments, opts Options) *Compactor {
	if opts.SegmentEvents <= 0 {
		opts.SegmentEvents = DefaultSegmentEvents
	}
	if opts.PageSize <= 0 {
		opts.PageSize = DefaultPageSize
	}
	return &Compactor{store: st, seg: seg, reader: &Reader{live: st, seg: seg}, opts: opts}
}

// Compact compacts c through keepAfter: the events with ids up to and
// including it leave the live stream for the archive, except the stream's
// newest, which a store always keeps. In order, and never trimming before
// the archive holds the events:
//  1. the state at keepAfter is checkpointed exactly at its position, so
//     reads after it never need the archive;
//  2. the events not archived yet, through that position, are written as
//     segments, each read back and verified;
//  3. they are trimmed from the stream.
//
// A compaction that failed half-way is finished by running it again. A
// checkpoint is one of the few a backend keeps: once newer ones replace it,
// reads between it and them fold from the archive, slower but the same.
// Errors: store.ErrInvalid (zero keepAfter), store.ErrNotFound (no event at
// or before keepAfter), the store's and the archive's.
func (k *Compactor) Compact(ctx context.Context, c store.Context, keepAfter event.ID) (Result, error) {
	if keepAfter.IsZero() {
		return Result{}, fmt.Errorf("compact: %s through the zero id: %w", c, store.ErrInvalid)
	}
	k.mu.Lock()
	defer k.mu.Unlock()

	s, err := k.stateAt(ctx, c, keepAfter)
	if err != nil {
		return Result{}, err
	}
	if s.Count() == 0 {
		return Result{}, fmt.Errorf("compact: %s has no event at or before %s: %w", c, keepAfter, store.ErrNotFound)
	}
	at := s.Position()
	body, err := reducers.MarshalCheckpoint(s)
	if err != nil {
		return Result{}, fmt.Errorf("compact: checkpoint of %s: %w", c, err)
	}
	if err := k.store.PutCheckpoint(ctx, c, at, body); err != nil {
		return Result{}, err
	}
	res := Result{Checkpoint: at}
	if err := k.archive(ctx, c, at, &res); err != nil {
		return res, err
	}
	if res.Trimmed, err = k.store.Trim(ctx, c, at.Next()); err != nil {
		return res, err
	}
	return res, nil
}

// stateAt folds c through at from the nearest checkpoint, reading through
// to the archive, so a context compacted before compacts again.
func (k *Compactor) stateAt(ctx context.Context, c store.Context, at event.ID) (reducers.State, error) {
	r := reducers.For(c.Type)
	s := r.Init()
	cpAt, body, err := k.store.Checkpoint(ctx, c, at)
	switch {
	case err == nil:
		// A checkpoint that does not decode is folded around, as the
		// snapshot cache does.
		if cs, derr := reducers.UnmarshalCheckpoint(r, body); derr == nil && cs.Position() == cpAt {
			s = cs
		}
	case !errors.Is(err, store.ErrNotFound):
		return nil, err
	}
	q := store.RangeQuery{After: s.Position(), Through: at, Limit: k.opts.PageSize}
	for {
		evs, err := k.reader.Range(ctx, c, q)
		if err != nil {
			return nil, err
		}
		if len(evs) > 0 {
			if s, err = r.Fold(s, evs); err != nil {
				return nil, fmt.Errorf("compact: fold %s: %w", c, err)
			}
			q.After = evs[len(evs)-1].ID
		}
		if len(evs) < k.opts.PageSize {
			return s, nil
		}
	}
}

// archive writes c's events after its last segment through at as segments
// of at most SegmentEvents, verifying each before the next.
func (k *Compactor) archive(ctx context.Context, c store.Context, at event.ID, res *Result) error {
	segs, err := k.seg.Segments(ctx, c)
	if err != nil {
		return err
	}
	q := store.RangeQuery{Through: at, Limit: k.opts.PageSize}
	if len(segs) > 0 {
		q.After = segs[len(segs)-1].LastID
	}
	batch := make([]event.Event, 0, k.opts.SegmentEvents)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		m, err := k.seg.PutSegment(ctx, c, batch)
		if err != nil {
			return err
		}
		ref := segmentRef(batch)
		v, err := k.seg.VerifySegment(ctx, c, ref)
		if err != nil {
			return err
		}
		if v.SHA256 != m.SHA256 || v.Events != int64(len(batch)) {
			return fmt.Errorf("compact: segment %s..%s of %s reads back differently", ref.FirstID, ref.LastID, c)
		}
		res.Segments++
		res.Archived += int64(len(batch))
		batch = batch[:0]
		return nil
	}
	for {
		evs, err := k.store.Range(ctx, c, q)
		if err != nil {
			return err
		}
		for _, e := range evs {
			batch = append(batch, e)
			if len(batch) == k.opts.SegmentEvents {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if len(evs) < k.opts.PageSize {
			return flush()
		}
		q.After = evs[len(evs)-1].ID
	}
}
