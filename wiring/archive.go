package wiring

import (
	"fmt"

	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/config"
	"github.com/nqd-dev/nqd/handlers"
)

// ArchiveReader is the archive in cfg.ArchiveDir for the API to read archived
// runs from, or nil when none is configured. It is opened whether or not
// retention is on, so runs archived under an earlier configuration stay
// readable.
func ArchiveReader(cfg config.Config) (handlers.ArchiveReader, error) {
	if cfg.ArchiveDir == "" {
		return nil, nil
	}
	dir, err := archive.NewDir(cfg.ArchiveDir, nil)
	if err != nil {
		return nil, fmt.Errorf("NQ_ARCHIVE_DIR: %w", err)
	}
	return dir, nil
}
