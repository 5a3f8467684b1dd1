package wiring

import (
	"context"
	"fmt"

	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/config"
)

// OpenArchive opens the archive cfg names: the bucket of NQ_ARCHIVE_URL or
// the directory of NQ_ARCHIVE_DIR; nil when neither is set. It is opened
// whether or not retention is on, so runs archived under an earlier
// configuration, or by another instance sharing the bucket, stay readable.
func OpenArchive(ctx context.Context, cfg config.Config) (*archive.Bucket, error) {
	switch {
	case cfg.ArchiveURL != "":
		a, err := archive.Open(ctx, cfg.ArchiveURL, nil)
		if err != nil {
			return nil, fmt.Errorf("NQ_ARCHIVE_URL: %w", err)
		}
		return a, nil
	case cfg.ArchiveDir != "":
		a, err := archive.NewDir(cfg.ArchiveDir, nil)
		if err != nil {
			return nil, fmt.Errorf("NQ_ARCHIVE_DIR: %w", err)
		}
		return a, nil
	}
	return nil, nil
}
