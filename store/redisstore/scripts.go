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

// scriptSet holds the scripts built on luaLib, whose source names the
// command append_events publishes with.
type scriptSet struct {
	append, runUpdate, claim *redis.Script
}

// plainScripts publish with PUBLISH; shardedScripts, for a Redis Cluster,
// with SPUBLISH, so that a message goes to the shard of its channel's slot
// only instead of to every node.
var (
	plainScripts   = newScriptSet("PUBLISH")
	shardedScripts = newScriptSet("SPUBLISH")
)

func newScriptSet(publish string) *scriptSet {
	// Redis knows a script by the digest of its whole source, so each
	// script gets its own copy of the library.
	withLib := func(src string) *redis.Script {
		return redis.NewScript("local PUBLISH = '" + publish + "'\n" + luaLib + src)
	}
	return &scriptSet{append: withLib(appendLua), runUpdate: withLib(runUpdateLua), claim: withLib(claimLua)}
}
