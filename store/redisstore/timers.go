package redisstore

import (
	"context"
	_ "embed"
	"strconv"
	"strings"

	"github.com/nqd-dev/nqd/store"
)

// DueTimers claims timers due at now (scripts/due_timers.lua). Errors:
// store.ErrUnavailable, store.ErrClosed.
func (s *Store) DueTimers(ctx context.Context, now, holdUntil int64, max int) ([]store.Timer, error) {
	if err := s.checkOpen("due timers"); err != nil {
		return nil, err
	}
	if max <= 0 {
		return nil, nil
	}
	vals, err := s.pipe.call(ctx, dueTimersScript, []string{s.timersKey()}, []any{now, holdUntil, max}).StringSlice()
	if err != nil {
		return nil, mapErr(ctx, "due timers", err)
	}
	var out []store.Timer
	for i := 0; i+1 < len(vals); i += 2 {
		p := strings.SplitN(vals[i], ":", 4)
		due, err := strconv.ParseFloat(vals[i+1], 64)
		if len(p) != 4 || err != nil {
			s.log.Warn().Str("timer", vals[i]).Msg("dropping an unreadable timer")
			s.client.ZRem(ctx, s.timersKey(), vals[i])
			continue
		}
		out = append(out, store.Timer{Kind: p[0], FlowName: p[1], RunID: p[2], Step: p[3], Due: int64(due)})
	}
	return out, nil
}
