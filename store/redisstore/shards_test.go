package redisstore

import (
	"fmt"
	"testing"

	"github.com/nqd-dev/nqd/internal/redistest"
)

// slotOf computes the slot the cluster itself names for a key, hash tags
// included.
func TestSlotOfMatchesTheCluster(t *testing.T) {
	client := redistest.ClusterClient(t)
	for _, key := range []string{"nq", "{nq}:flow:r1", "{nq:7}:queue:q:ready", "a{b}c", "a{}b", "{}x", "x{y", "nq:flow:r1", "{nqt12:3}"} {
		want, err := client.ClusterKeySlot(t.Context(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := slotOf(key); got != int(want) {
			t.Errorf("slotOf(%q) = %d, the cluster says %d", key, got, want)
		}
	}
}

// Each shard's tag lies in its own n-th of the slots, so n shards take n
// slots spread evenly: with n a multiple of the primaries of a cluster whose
// primaries hold equal ranges, each primary serves n/primaries shards.
func TestShardTagsSpreadOverTheSlots(t *testing.T) {
	for _, n := range []int{2, 4, 9, 64, MaxShards} {
		tags := shardTags("nq", n)
		seen := map[int]bool{}
		for s, tag := range tags {
			slot := slotOf(tag + ":flow:r1")
			if seen[slot] {
				t.Fatalf("n=%d: shard %d (%s) shares slot %d", n, s, tag, slot)
			}
			seen[slot] = true
			if lo, hi := s*slots/n, (s+1)*slots/n; slot < lo || slot >= hi {
				t.Errorf("n=%d: shard %d (%s) in slot %d, want [%d, %d)", n, s, tag, slot, lo, hi)
			}
		}
	}
}

// Ids spread over the shards about evenly.
func TestShardIndexSpreadsIDs(t *testing.T) {
	const n, ids = 9, 9000
	count := make([]int, n)
	for i := range ids {
		count[shardIndex(fmt.Sprintf("run-%d", i), n)]++
	}
	for s, c := range count {
		if c < ids/n*8/10 || c > ids/n*12/10 {
			t.Errorf("shard %d holds %d of %d ids: %v", s, c, ids, count)
		}
	}
}
