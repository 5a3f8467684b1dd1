package redisstore

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/store"
)

// A deployment's keys are split over Options.Shards shards. Each shard is
// one key prefix, and on a Redis Cluster one hash slot, holding whole
// contexts and runs with every index entry, job, timer and idempotency
// record their atomic steps touch, so that each step is one script on one
// slot:
//
//   - a context (its stream, checkpoints, idempotency records and live
//     channel) and a run (its record, status index entries, the jobs its
//     updates enqueue and its timers) live on the shard of their id
//     (shardIndex): a run and its flow context share one;
//   - each shard keeps its own indexes (contexts of a type, runs of a flow,
//     the runs of each status, the kind index, queue ready sets, due timers,
//     the retention set), and its own copy of the sets its scripts read (the
//     watched kinds, the paused queues);
//   - a KV record lives on the shard of its key;
//   - what no script reads beside other keys (flow definitions, secrets)
//     lives on shard 0.
//
// Reads that span shards gather them: index pages merge the shards' pages,
// counts add up, claims and timer pickups visit the shards in turn.
//
// With one shard (the default) the prefix is Options.Prefix, or on a
// cluster {Options.Prefix}: the layout nqd always had. With more, shard s's
// prefix is the hash tag {<Prefix>:<k>}, k the smallest number whose slot
// lies in the s-th of n equal ranges of the 16,384 slots (shardTags), so
// that the shards spread over a cluster's primaries as evenly as its slots
// do, on a single server too so that the names do not depend on where they
// are kept.

// MaxShards bounds Options.Shards: more shards than primaries times a few
// spread nothing further, and every gathered read visits each.
const MaxShards = 1024

// shard is one part of the keyspace: its key prefix, the pipeline its
// scripts go through and the live feed of its channels.
type shard struct {
	prefix string
	pipe   *pipeliner
	feed   *liveFeed
	// failing is set while the shard's last write failed as unavailable
	// or outcome unknown (its primary is down, or failing over), and
	// cleared by its next write that succeeds; probing is held by the one
	// visit of eachShard that looks at a failing shard.
	failing, probing atomic.Bool
}

// note records the outcome of a write on sh (see shard.failing).
func (sh *shard) note(err error) {
	switch {
	case err == nil:
		sh.failing.Store(false)
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, store.ErrOutcomeUnknown):
		sh.failing.Store(true)
	}
}

// shardIndex places an id (a context's, a run's, a KV key) on one of n
// shards, by a hash that never changes.
func shardIndex(id string, n int) int {
	if n <= 1 {
		return 0
	}
	return int(crc32.ChecksumIEEE([]byte(id)) % uint32(n))
}

// on returns the shard of an id.
func (s *Store) on(id string) *shard { return s.shards[shardIndex(id, len(s.shards))] }

// home is shard 0, which keeps what belongs to no id.
func (s *Store) home() *shard { return s.shards[0] }

// shardTags returns the key prefixes of n shards of prefix (with no hash
// tag of its own): {<prefix>:<k>} for shard s, k the smallest number whose
// slot falls in [s*16384/n, (s+1)*16384/n). CRC16 spreads the numbers over
// the slots, so each range has one within a few times n tries.
func shardTags(prefix string, n int) []string {
	tags := make([]string, n)
	found := 0
	for k := 0; found < n; k++ {
		tag := prefix + ":" + strconv.Itoa(k)
		s := slotOf(tag) * n / slots
		if tags[s] == "" {
			tags[s] = "{" + tag + "}"
			found++
		}
	}
	return tags
}

// slots is the number of hash slots of a Redis Cluster.
const slots = 16384

// slotOf is the hash slot of a key as Redis Cluster computes it: CRC16
// (XMODEM) of the key's hash tag, or of the whole key without one, modulo
// 16384.
func slotOf(key string) int {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j > i+1 {
					key = key[i+1 : j]
				}
				break
			}
		}
		break
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % slots
}

// shardsKey records how many shards the data under the prefix was written
// with. It sits where the one-shard layout keeps its keys, so that every
// layout finds it.
func (s *Store) shardsKey() string {
	base := s.opts.Prefix
	if s.cluster {
		base = "{" + base + "}"
	}
	return base + ":engine:shards"
}

// ErrShards is the error of a store opened with another number of shards
// than its data was written with.
var ErrShards = errors.New("the data under this prefix was written with another number of shards")

// CheckShards records the number of shards the store was opened with, or
// refuses with ErrShards when the data under the prefix was written with
// another: each id's shard depends on the number, so data written with
// another one would not be found. Data written before the number was
// recorded has one shard. Call it once at start, before anything is
// written. Errors: ErrShards, store.ErrUnavailable.
func (s *Store) CheckShards(ctx context.Context) error {
	n := len(s.shards)
	have, err := s.client.Get(ctx, s.shardsKey()).Result()
	switch {
	case errors.Is(err, redis.Nil):
		if n > 1 {
			// Unrecorded data is one shard's: its keys carry the plain
			// prefix.
			one := s.opts.Prefix
			if s.cluster {
				one = "{" + one + "}"
			}
			for _, k := range []string{":engine:flows:defs", ":flows", ":engine:timers:due", ":engine:kinds:watched", ":engine:runs:expiring"} {
				found, err := s.client.Exists(ctx, one+k).Result()
				if err != nil {
					return mapErr(ctx, "check shards", err)
				}
				if found > 0 {
					return fmt.Errorf("redisstore: %w: it has 1, nqd was started with %d", ErrShards, n)
				}
			}
		}
		if err := s.client.SetNX(ctx, s.shardsKey(), n, 0).Err(); err != nil {
			return mapErr(ctx, "check shards", err)
		}
		return s.CheckShards(ctx)
	case err != nil:
		return mapErr(ctx, "check shards", err)
	case have != strconv.Itoa(n):
		return fmt.Errorf("redisstore: %w: it has %s, nqd was started with %d", ErrShards, have, n)
	}
	return nil
}

// closeShards closes each pipeline and live feed once: on a single server
// the shards share them.
func (s *Store) closeShards() {
	feeds := map[*liveFeed]bool{}
	pipes := map[*pipeliner]bool{}
	for _, sh := range s.shards {
		if !feeds[sh.feed] {
			feeds[sh.feed] = true
			sh.feed.close()
		}
		if !pipes[sh.pipe] {
			pipes[sh.pipe] = true
			sh.pipe.close()
		}
	}
}

// keyspace returns a client whose SCAN sees every key of sh: the client
// itself, or on a cluster the primary that serves sh's slot.
func (s *Store) keyspace(ctx context.Context, sh *shard) (redis.UniversalClient, error) {
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		return cc.MasterForKey(ctx, sh.prefix)
	}
	return s.client, nil
}

// eachShard calls fn for the shards in turn, starting at the shard after
// the one the previous call started at, so that visits that stop early (a
// claim that found its jobs) spread over the shards, until fn says it is
// done. A shard whose call fails does not stop the visit: the others are
// still served, and eachShard returns the failures joined.
//
// A failing shard (shard.failing) comes last, and only a visit that found
// nothing on the others (found false) and that no other visit is probing
// the shard with looks at it: its calls wait out its primary's failover
// (pipeliner.call), which the other shards' work should not wait for.
func (s *Store) eachShard(found func() bool, fn func(*shard) (done bool, err error)) error {
	n := len(s.shards)
	start := 0
	if n > 1 {
		start = int(s.rotate.Add(1) % uint64(n))
	}
	var errs []error
	var failing []*shard
	visit := func(sh *shard) bool {
		done, err := fn(sh)
		if err != nil {
			errs = append(errs, err)
		}
		return done
	}
	for i := range n {
		sh := s.shards[(start+i)%n]
		if n > 1 && sh.failing.Load() {
			failing = append(failing, sh)
			continue
		}
		if visit(sh) {
			return errors.Join(errs...)
		}
	}
	for _, sh := range failing {
		if found() || !sh.probing.CompareAndSwap(false, true) {
			continue
		}
		done := visit(sh)
		sh.probing.Store(false)
		if done {
			break
		}
	}
	return errors.Join(errs...)
}

// window is the part of a merged list that a page of offset and limit
// shows.
func window[T any](xs []T, offset, limit int) []T {
	xs = xs[min(offset, len(xs)):]
	return xs[:min(limit, len(xs))]
}

// ShardTags returns the hash tags of the shards of a deployment under
// prefix with n shards on a Redis Cluster, shard by shard: keys that the
// cluster places where it places each shard's keys.
func ShardTags(prefix string, n int) []string {
	if n <= 1 {
		return []string{"{" + prefix + "}"}
	}
	return shardTags(prefix, n)
}

// ShardOf returns the shard, of n, that id (a context's, a run's, a KV
// key) lives on: an index into ShardTags.
func ShardOf(id string, n int) int { return shardIndex(id, n) }
