package main

import (
	"context"
	"time"
)

// pgProfile reports whether profile runs nqd on the PostgreSQL the tool
// starts rather than on its redis-server.
func pgProfile(profile string) bool {
	return profile == "pg-appends" || profile == "pg-flows"
}

// flowProfile reports whether profile needs the example flows loaded.
func flowProfile(profile string) bool {
	return profile == "flows" || profile == "pg-flows" || profile == "schedules"
}

// runPGFlows is the flows profile with nqd on PostgreSQL: the same runs of
// `pipeline`, the same rate and the same in-process demo worker, so its
// figures compare with the flows profile's on Redis. A flow run has no bare
// PostgreSQL equivalent to measure against; what it costs on PostgreSQL is
// the engine's run updates, one transaction each (see store/pgstore).
func runPGFlows(ctx context.Context, e env, rate float64, d time.Duration, conns, workers int) (flowsResult, error) {
	return runFlows(ctx, e, rate, d, conns, workers)
}
