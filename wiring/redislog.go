package wiring

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// RouteRedisLog sends go-redis's own log lines (a pool that cannot dial, a
// Sentinel failover) through log instead of go-redis's plain-text stderr
// logger, so the log stays JSON lines. go-redis keeps its logger in a
// package variable, so main calls this once for the process; New does not,
// since a test process builds many Apps.
func RouteRedisLog(log zerolog.Logger) {
	redis.SetLogger(redisLog{log.With().Str("component", "go-redis").Logger()})
}

// redisLog logs go-redis's lines at debug: nqd logs the failures they
// accompany itself, once per outage, and a line per failed dial would flood
// the log while Redis is down. A recovered panic is an error.
type redisLog struct{ log zerolog.Logger }

func (l redisLog) Printf(_ context.Context, format string, v ...any) {
	ev := l.log.Debug()
	if strings.Contains(format, "panic") {
		ev = l.log.Error()
	}
	ev.Msgf(strings.TrimSpace(format), v...)
}
