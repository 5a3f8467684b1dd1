package wiring

import (
	"fmt"

	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/compact"
	"github.com/nqd-dev/nqd/config"
	"github.com/nqd-dev/nqd/snapshots"
)

// Compaction is what the server reads a context's history through and the
// compactor of its streams. With cfg.ArchiveDir set, history reads through
// to the archive's segments, so the snapshot cache and the read routes still
// answer for trimmed events; otherwise history is st itself and the
// compactor is nil (the compact route answers 404).
func Compaction(st compact.Store, cfg config.Config) (snapshots.Reader, *compact.Compactor, error) {
	if cfg.ArchiveDir == "" {
		return st, nil, nil
	}
	dir, err := archive.NewDir(cfg.ArchiveDir, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("NQ_ARCHIVE_DIR: %w", err)
	}
	return compact.NewReader(st, dir), compact.New(st, dir, compact.Options{}), nil
}
