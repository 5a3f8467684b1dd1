package redisstore

import (
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/store"
)

// The flow engine's keys and scripts are listed in the package doc.

var (
	_ store.DefinitionStore = (*Store)(nil)
	_ store.RunStore        = (*Store)(nil)
)

var (
	//go:embed scripts/run_update.lua
	runUpdateLua string
	//go:embed scripts/claim.lua
	claimLua string
	//go:embed scripts/heartbeat.lua
	heartbeatLua string
	//go:embed scripts/due_timers.lua
	dueTimersLua string

	heartbeatScript = redis.NewScript(heartbeatLua)
	dueTimersScript = redis.NewScript(dueTimersLua)
)

// runStatuses are the statuses whose indexes DeleteRuns removes.
var runStatuses = []string{store.RunRunning, store.RunAwaiting, store.RunCompleted, store.RunFailed, store.RunCancelled}

func (sh *shard) defsKey() string   { return sh.prefix + ":engine:flows:defs" }
func (sh *shard) timersKey() string { return sh.prefix + ":engine:timers:due" }
func (sh *shard) metaKey(flow, run string) string {
	return sh.prefix + ":flows:" + flow + ":meta:" + run
}
func (sh *shard) statusKey(flow, status string) string {
	return sh.prefix + ":flows:" + flow + ":status:" + status
}
func (sh *shard) readyKey(queue string) string { return sh.prefix + ":queue:" + queue + ":ready" }
func (sh *shard) jobsKey(queue string) string  { return sh.prefix + ":queue:" + queue + ":jobs" }

func (s *Store) checkOpen(op string) error {
	if s.closed.Load() {
		return fmt.Errorf("redisstore: %s: %w", op, store.ErrClosed)
	}
	return nil
}
