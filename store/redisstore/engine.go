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

func (s *Store) defsKey() string   { return s.prefix + ":engine:flows:defs" }
func (s *Store) timersKey() string { return s.prefix + ":engine:timers:due" }
func (s *Store) metaKey(flow, run string) string {
	return s.prefix + ":flows:" + flow + ":meta:" + run
}
func (s *Store) statusKey(flow, status string) string {
	return s.prefix + ":flows:" + flow + ":status:" + status
}
func (s *Store) readyKey(queue string) string { return s.prefix + ":queue:" + queue + ":ready" }
func (s *Store) jobsKey(queue string) string  { return s.prefix + ":queue:" + queue + ":jobs" }

func (s *Store) checkOpen(op string) error {
	if s.closed.Load() {
		return fmt.Errorf("redisstore: %s: %w", op, store.ErrClosed)
	}
	return nil
}
