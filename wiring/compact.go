package wiring

import (
	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/compact"
	"github.com/nqd-dev/nqd/snapshots"
)

// Compaction is what the server reads a context's history through and the
// compactor of its streams. With an archive, history reads through to the
// archive's segments, so the snapshot cache and the read routes still
// answer for trimmed events; without one (arch nil) history is st itself
// and the compactor is nil (the compact route answers 404).
func Compaction(st compact.Store, arch *archive.Bucket) (snapshots.Reader, *compact.Compactor) {
	if arch == nil {
		return st, nil
	}
	return compact.NewReader(st, arch), compact.New(st, arch, compact.Options{})
}
