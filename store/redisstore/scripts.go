package redisstore

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// luaLib is what the scripts share (scripts/lib.lua): iso_ms, which formats
// an entry's time as Go does, append_events, which stores, publishes and
// indexes events, held_by, and claim_jobs, which claims ready jobs.
//
//go:embed scripts/lib.lua
var luaLib string

// withLib is a script whose source starts with luaLib. Redis knows a script
// by the digest of its whole source, so each gets its own copy.
func withLib(src string) *redis.Script {
	return redis.NewScript(luaLib + src)
}
