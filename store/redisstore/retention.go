package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

//go:embed scripts/delete_run.lua
var deleteRunLua string

var deleteRunScript = redis.NewScript(deleteRunLua)

func (s *Store) expiringKey() string { return s.prefix + ":engine:runs:expiring" }

// ExpiredRuns returns up to max runs due at now, earliest first. Errors:
// store.ErrUnavailable, store.ErrClosed.
func (s *Store) ExpiredRuns(ctx context.Context, now int64, max int) ([]store.ExpiredRun, error) {
	if err := s.checkOpen("expired runs"); err != nil {
		return nil, err
	}
	if max <= 0 {
		return nil, nil
	}
	zs, err := s.client.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
		Key: s.expiringKey(), Start: "-inf", Stop: strconv.FormatInt(now, 10), ByScore: true, Count: int64(max),
	}).Result()
	if err != nil {
		return nil, mapErr(ctx, "expired runs", err)
	}
	out := make([]store.ExpiredRun, 0, len(zs))
	for _, z := range zs {
		member, _ := z.Member.(string)
		flow, run, ok := strings.Cut(member, ":")
		if !ok {
			s.log.Warn().Str("member", member).Msg("dropping an unreadable retention entry")
			s.client.ZRem(ctx, s.expiringKey(), member)
			continue
		}
		out = append(out, store.ExpiredRun{FlowName: flow, RunID: run, Due: int64(z.Score)})
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
	keys := []string{s.expiringKey(), s.metaKey(flow, run), s.streamKey(c), s.checkpointsKey(c),
		s.indexKey(store.Index{Type: "flow"}), s.indexKey(store.Index{Type: "flow", Name: flow})}
	for _, st := range runStatuses {
		keys = append(keys, s.statusKey(flow, st))
	}
	code, err := s.pipe.call(ctx, deleteRunScript, keys, []any{flow + ":" + run, run, now}).Int()
	if err != nil {
		return mapErr(ctx, "delete expired run", err)
	}
	if code != 0 {
		return fmt.Errorf("redisstore: run %s of %s: %w: not due", run, flow, store.ErrConflict)
	}
	return nil
}
