package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nqd-dev/nqd/archive"
)

// WatchArchive exports the archive bucket's counts, read at each scrape:
// what it wrote (archives, manifests, compaction segments, step data kept
// by reference) and how its reads and writes failed.
func (m *Metrics) WatchArchive(stats func() archive.Stats) {
	counter := func(name, help string, v func(archive.Stats) int64) {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help},
			func() float64 { return float64(v(stats())) }))
	}
	counter("archive_objects_written_total", "Objects committed to the archive's bucket: run archives, manifests, compaction segments, large step data.",
		func(s archive.Stats) int64 { return s.ObjectsWritten })
	counter("archive_bytes_written_total", "Bytes of the objects committed to the archive's bucket.",
		func(s archive.Stats) int64 { return s.BytesWritten })
	counter("archive_write_failures_total", "Writes to the archive's bucket that committed nothing (the bucket unreachable or refusing, an upload cut off).",
		func(s archive.Stats) int64 { return s.WriteFailures })
	counter("archive_read_failures_total", "Reads from the archive's bucket that failed, a missing object aside.",
		func(s archive.Stats) int64 { return s.ReadFailures })
	counter("archive_corrupt_total", "Reads that found an object unlike its manifest or reference (answered 502 archive_corrupt).",
		func(s archive.Stats) int64 { return s.Corrupt })
}
