// Package retention keeps nqd's storage bounded: a Reaper finds the finished
// runs whose retention has ended (store.Retainer), archives each one when an
// archive is configured, and only then deletes it from the store.
package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/outage"
	"github.com/nqd-dev/nqd/store"
)

// Store is what the reaper needs of a backend.
type Store interface {
	Range(ctx context.Context, c store.Context, q store.RangeQuery) ([]event.Event, error)
	RunMeta(ctx context.Context, flow, run string) (store.RunMeta, error)
	store.Retainer
}

// Options tune a Reaper. The zero value expires without archiving.
type Options struct {
	// Archive, when set, receives every run before it is deleted; a run
	// whose archive fails to write or to verify stays in the store and is
	// tried again.
	Archive archive.Archive
	// Now is the reaper's clock; default time.Now.
	Now func() time.Time
	// Batch is how many due runs one store call returns; default 100.
	Batch int
	// Logger receives a line per expired run and per failure.
	Logger zerolog.Logger
}

// Reaper deletes runs whose retention has ended.
type Reaper struct {
	store Store
	opts  Options
}

// New returns a Reaper over s.
func New(s Store, opts Options) *Reaper {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Batch <= 0 {
		opts.Batch = 100
	}
	return &Reaper{store: s, opts: opts}
}

// pageSize bounds the events held in memory while a run is archived.
const pageSize = 1000

// Sweep archives and deletes every run due now and returns how many it
// deleted. A run that fails to archive is skipped and left due; the first
// such error is returned after the others were tried.
func (r *Reaper) Sweep(ctx context.Context) (int, error) {
	now := r.opts.Now().UnixMilli()
	deleted := 0
	var firstErr error
	skipped := map[store.ExpiredRun]bool{}
	for {
		due, err := r.store.ExpiredRuns(ctx, now, r.opts.Batch+len(skipped))
		if err != nil {
			return deleted, err
		}
		progress := false
		for _, run := range due {
			if skipped[run] {
				continue
			}
			progress = true
			err := r.expire(ctx, run, now)
			switch {
			case err == nil:
				deleted++
			case errors.Is(err, store.ErrConflict):
				// Resumed or taken by another instance since it was listed.
			case ctx.Err() != nil:
				return deleted, ctx.Err()
			default:
				r.opts.Logger.Error().Err(err).Str("flow", run.FlowName).Str("run", run.RunID).Msg("run not expired")
				skipped[run] = true
				if firstErr == nil {
					firstErr = err
				}
			}
		}
		if !progress || len(due) < r.opts.Batch+len(skipped) {
			return deleted, firstErr
		}
	}
}

func (r *Reaper) expire(ctx context.Context, run store.ExpiredRun, now int64) error {
	if r.opts.Archive != nil {
		var record json.RawMessage
		m, err := r.store.RunMeta(ctx, run.FlowName, run.RunID)
		switch {
		case err == nil:
			if record, err = json.Marshal(m); err != nil {
				return err
			}
		case !errors.Is(err, store.ErrNotFound):
			return err
		}
		c := store.Context{Type: "flow", ID: run.RunID}
		man, err := r.opts.Archive.Put(ctx, c, record, Events(ctx, r.store, c))
		if err != nil {
			return fmt.Errorf("archive %s: %w", c, err)
		}
		// The run leaves the store only once its archive reads back whole
		// from where it was written: the commit of an upload is the
		// bucket's word, this read is ours.
		got, err := r.opts.Archive.Verify(ctx, c)
		if err != nil {
			return fmt.Errorf("verify the archive of %s: %w", c, err)
		}
		if got.SHA256 != man.SHA256 || got.Events != man.Events {
			return fmt.Errorf("verify the archive of %s: it reads back as another archive (%d events, sha256 %s)", c, got.Events, got.SHA256)
		}
		r.opts.Logger.Debug().Str("run", run.RunID).Int64("events", man.Events).Msg("run archived")
	}
	if err := r.store.DeleteExpiredRun(ctx, run.FlowName, run.RunID, now); err != nil {
		return err
	}
	r.opts.Logger.Info().Str("flow", run.FlowName).Str("run", run.RunID).Msg("run expired")
	return nil
}

// Events reads c's whole stream a page at a time, so a long run is archived
// without holding all of it.
func Events(ctx context.Context, s interface {
	Range(ctx context.Context, c store.Context, q store.RangeQuery) ([]event.Event, error)
}, c store.Context) iter.Seq2[event.Event, error] {
	return func(yield func(event.Event, error) bool) {
		var after event.ID
		for {
			page, err := s.Range(ctx, c, store.RangeQuery{After: after, Limit: pageSize})
			if err != nil {
				yield(event.Event{}, err)
				return
			}
			for _, e := range page {
				if !yield(e, nil) {
					return
				}
			}
			if len(page) < pageSize {
				return
			}
			after = page[len(page)-1].ID
		}
	}
}

// Run sweeps every interval until ctx ends; errors are logged, not returned,
// because the next sweep tries again.
func (r *Reaper) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := outage.New(r.opts.Logger, "retention sweep")
	for {
		if _, err := r.Sweep(ctx); err != nil && ctx.Err() == nil {
			failing.Failed(err)
		} else if err == nil {
			failing.Succeeded()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
