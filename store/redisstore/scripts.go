package redisstore

import (
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// luaLib is what the scripts share (scripts/lib.lua): iso_ms, which formats
// an entry's time as Go does, append_events, which stores, publishes and
// indexes events, held_by, and claim_jobs, which claims ready jobs.
//
//go:embed scripts/lib.lua
var luaLib string

// scriptSet holds the scripts built on luaLib, whose source names the
// command append_events publishes with, and whether the kind index takes its
// entries' ids from the server's clock (KIND_CLOCK, see kind_id in lib.lua).
type scriptSet struct {
	append, runUpdate, claim *redis.Script
}

// scriptSets are by [cluster][several shards]: on a Redis Cluster the
// scripts publish with SPUBLISH, so that a message goes to the shard of its
// channel's slot only instead of to every node; with several shards the
// kind index entries take their ids from the clock.
var scriptSets = [2][2]*scriptSet{
	{newScriptSet("PUBLISH", false), newScriptSet("PUBLISH", true)},
	{newScriptSet("SPUBLISH", false), newScriptSet("SPUBLISH", true)},
}

func scriptsFor(cluster, shards bool) *scriptSet {
	b := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	return scriptSets[b(cluster)][b(shards)]
}

func newScriptSet(publish string, kindClock bool) *scriptSet {
	// Redis knows a script by the digest of its whole source, so each
	// script gets its own copy of the library.
	head := fmt.Sprintf("local PUBLISH = '%s'\nlocal KIND_CLOCK = %t\n", publish, kindClock)
	withLib := func(src string) *redis.Script {
		return redis.NewScript(head + luaLib + src)
	}
	return &scriptSet{append: withLib(appendLua), runUpdate: withLib(runUpdateLua), claim: withLib(claimLua)}
}
