package wiring

import (
	"context"
	"sync"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/config"
	"github.com/nqd-dev/nqd/retention"
	"github.com/nqd-dev/nqd/store"
)

// RetentionPolicy is the store's retention of finished runs from cfg.
func RetentionPolicy(cfg config.Config) store.Retention {
	return store.Retention{Completed: cfg.RetainCompleted, Failed: cfg.RetainFailed, Cancelled: cfg.RetainCancelled}
}

// StartRetention runs the reaper over st when any retention is configured,
// archiving into arch when it is not nil. stop ends the reaper and waits for
// its sweep to return.
func StartRetention(ctx context.Context, st retention.Store, cfg config.Config, arch *archive.Bucket, log zerolog.Logger) (stop func()) {
	if RetentionPolicy(cfg) == (store.Retention{}) {
		return func() {}
	}
	opts := retention.Options{Logger: log.With().Str("component", "retention").Logger()}
	if arch != nil {
		opts.Archive = arch
	} else {
		log.Warn().Msg("runs expire without an archive: set NQ_ARCHIVE_URL or NQ_ARCHIVE_DIR to keep them")
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { retention.New(st, opts).Run(ctx, cfg.RetentionInterval) })
	return func() { cancel(); wg.Wait() }
}
