package redisstore

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

//go:embed scripts/trim.lua
var trimLua string

var trimScript = redis.NewScript(trimLua)

// Trim removes c's entries below before with an exact XTRIM MINID, keeping
// the newest entry. Errors: ErrInvalid, ErrClosed, ErrUnavailable.
func (s *Store) Trim(ctx context.Context, c store.Context, before event.ID) (int64, error) {
	if s.closed.Load() {
		return 0, fmt.Errorf("redisstore: trim: %w", store.ErrClosed)
	}
	if !c.Valid() {
		return 0, invalid("trim", "context %q", c)
	}
	if before.IsZero() {
		return 0, invalid("trim", "before the zero id")
	}
	sh := s.on(c.ID)
	n, err := sh.pipe.call(ctx, trimScript, []string{sh.streamKey(c)}, []any{before.String()}).Int64()
	if err != nil {
		return 0, mapErr(ctx, "trim", err)
	}
	return n, nil
}
