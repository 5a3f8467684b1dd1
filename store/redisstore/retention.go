package redisstore

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

//go:embed scripts/delete_run.lua
var deleteRunLua string

var deleteRunScript = redis.NewScript(deleteRunLua)

func (sh *shard) expiringKey() string { return sh.prefix + ":engine:runs:expiring" }

// ExpiredRuns returns up to max runs due at now, earliest first. Errors:
// store.ErrUnavailable, store.ErrClosed.
func (s *Store) ExpiredRuns(ctx context.Context, now int64, max int) ([]store.ExpiredRun, error) {
	if err := s.checkOpen("expired runs"); err != nil {
		return nil, err
	}
	if max <= 0 {
		return nil, nil
	}
	// Each shard's earliest, merged: the earliest max of all.
	var out []store.ExpiredRun
	for _, sh := range s.shards {
		zs, err := s.client.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
			Key: sh.expiringKey(), Start: "-inf", Stop: strconv.FormatInt(now, 10), ByScore: true, Count: int64(max),
		}).Result()
		if err != nil {
			return nil, mapErr(ctx, "expired runs", err)
		}
		for _, z := range zs {
			member, _ := z.Member.(string)
			flow, run, ok := strings.Cut(member, ":")
			if !ok {
				s.log.Warn().Str("member", member).Msg("dropping an unreadable retention entry")
				s.client.ZRem(ctx, sh.expiringKey(), member)
				continue
			}
			out = append(out, store.ExpiredRun{FlowName: flow, RunID: run, Due: int64(z.Score)})
		}
	}
	if len(s.shards) > 1 {
		slices.SortStableFunc(out, func(a, b store.ExpiredRun) int { return cmp.Compare(a.Due, b.Due) })
		out = window(out, 0, max)
	}
	if out == nil {
		out = []store.ExpiredRun{}
	}
	return out, nil
}

// DeleteExpiredRun removes a due run (scripts/delete_run.lua). Errors:
// store.ErrConflict, store.ErrInvalid, store.ErrUnavailable, store.ErrClosed.
func (s *Store) DeleteExpiredRun(ctx context.Context, flow, run string, now int64) error {
	if err := s.checkOpen("delete expired run"); err != nil {
		return err
	}
	if !event.ValidName(flow) || !event.ValidContextID(run) {
		return invalid("delete expired run", "run %q of flow %q", run, flow)
	}
	c := store.Context{Type: "flow", ID: run}
	sh := s.on(run)
	keys := []string{sh.expiringKey(), sh.metaKey(flow, run), sh.streamKey(c), sh.checkpointsKey(c),
		sh.indexKey(store.Index{Type: "flow"}), sh.indexKey(store.Index{Type: "flow", Name: flow})}
	for _, st := range runStatuses {
		keys = append(keys, sh.statusKey(flow, st))
	}
	code, err := sh.pipe.call(ctx, deleteRunScript, keys, []any{flow + ":" + run, run, now}).Int()
	if err != nil {
		return mapErr(ctx, "delete expired run", err)
	}
	if code != 0 {
		return fmt.Errorf("redisstore: run %s of %s: %w: not due", run, flow, store.ErrConflict)
	}
	return nil
}
