package redisstore

import (
	"context"
	_ "embed"
	"strconv"
	"strings"

	"github.com/nqd-dev/nqd/store"
)

// DueTimers claims timers due at now (scripts/due_timers.lua), visiting
// the shards in turn (eachShard) until max are taken. A shard that fails
// does not stop the pickup: the timers of the shards that answered are
// returned, with the failures' error when there are any (a caller must fire
// the timers even then: they are held for it). Errors:
// store.ErrUnavailable, store.ErrClosed.
func (s *Store) DueTimers(ctx context.Context, now, holdUntil int64, max int) ([]store.Timer, error) {
	if err := s.checkOpen("due timers"); err != nil {
		return nil, err
	}
	if max <= 0 {
		return nil, nil
	}
	var out []store.Timer
	err := s.eachShard(func() bool { return len(out) > 0 }, func(sh *shard) (bool, error) {
		vals, err := sh.pipe.call(ctx, dueTimersScript, []string{sh.timersKey()}, []any{now, holdUntil, max - len(out)}).StringSlice()
		if err != nil {
			err = mapErr(ctx, "due timers", err)
			sh.note(err)
			return false, err
		}
		sh.note(nil)
		for i := 0; i+1 < len(vals); i += 2 {
			p := strings.SplitN(vals[i], ":", 4)
			due, err := strconv.ParseFloat(vals[i+1], 64)
			if len(p) != 4 || err != nil {
				s.log.Warn().Str("timer", vals[i]).Msg("dropping an unreadable timer")
				s.client.ZRem(ctx, sh.timersKey(), vals[i])
				continue
			}
			out = append(out, store.Timer{Kind: p[0], FlowName: p[1], RunID: p[2], Step: p[3], Due: int64(due)})
		}
		return len(out) >= max, nil
	})
	if err != nil && len(out) == 0 {
		return nil, err
	}
	return out, err
}
