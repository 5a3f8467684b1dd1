package redisstore

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// pausedKey is the set of paused queue names; claim.lua reads it in the
// same script that hands out jobs.
func (sh *shard) pausedKey() string { return sh.prefix + ":engine:queues:paused" }

// SetQueuePaused pauses or resumes queue. Errors: store.ErrInvalid,
// store.ErrUnavailable, store.ErrClosed.
func (s *Store) SetQueuePaused(ctx context.Context, queue string, paused bool) error {
	if err := s.checkOpen("pause queue"); err != nil {
		return err
	}
	if !event.ValidName(queue) {
		return invalid("pause queue", "queue %q", queue)
	}
	// Each shard's claims read their shard's copy of the set. A pause
	// returns once every shard has it; one that failed half-way leaves the
	// queue paused on some shards, and PausedQueues names it until it is
	// paused, or resumed, again.
	for _, sh := range s.shards {
		var err error
		if paused {
			err = s.client.SAdd(ctx, sh.pausedKey(), queue).Err()
		} else {
			err = s.client.SRem(ctx, sh.pausedKey(), queue).Err()
		}
		if err != nil {
			return mapErr(ctx, "pause queue", err)
		}
	}
	return nil
}

// PausedQueues returns the paused queues in name order.
func (s *Store) PausedQueues(ctx context.Context) ([]string, error) {
	if err := s.checkOpen("paused queues"); err != nil {
		return nil, err
	}
	var names []string
	for _, sh := range s.shards {
		some, err := s.client.SMembers(ctx, sh.pausedKey()).Result()
		if err != nil {
			return nil, mapErr(ctx, "paused queues", err)
		}
		names = append(names, some...)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// JobQueues finds the queues' ready sets with SCAN: Redis keeps no list of
// them, and a ready set exists exactly while its queue holds a job.
func (s *Store) JobQueues(ctx context.Context) ([]string, error) {
	if err := s.checkOpen("job queues"); err != nil {
		return nil, err
	}
	out := []string{}
	for _, sh := range s.shards {
		head, tail := sh.prefix+":queue:", ":ready"
		node, err := s.keyspace(ctx, sh)
		if err != nil {
			return nil, mapErr(ctx, "job queues", err)
		}
		it := node.Scan(ctx, 0, head+"*"+tail, 1000).Iterator()
		for it.Next(ctx) {
			name := strings.TrimSuffix(strings.TrimPrefix(it.Val(), head), tail)
			// Only names nqd could have written: a key another program put
			// under the prefix is not a queue.
			if event.ValidName(name) && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
		if err := it.Err(); err != nil {
			return nil, mapErr(ctx, "job queues", err)
		}
	}
	slices.Sort(out)
	return out, nil
}

// QueueJobs pages over the queue's ready set by score and reads each job.
func (s *Store) QueueJobs(ctx context.Context, queue string, min, max int64, offset, limit int) ([]store.Job, error) {
	if err := s.checkOpen("queue jobs"); err != nil {
		return nil, err
	}
	if !event.ValidName(queue) {
		return nil, invalid("queue jobs", "queue %q", queue)
	}
	if offset < 0 || limit < 0 {
		return nil, invalid("queue jobs", "page offset %d, limit %d", offset, limit)
	}
	out := []store.Job{}
	if limit == 0 {
		return out, nil
	}
	// Each shard's page from the start through offset+limit, merged by
	// score and then id, the order of one ready set.
	from, n := offset, limit
	if len(s.shards) > 1 {
		from, n = 0, offset+limit
	}
	for _, sh := range s.shards {
		ids, err := s.client.ZRangeByScore(ctx, sh.readyKey(queue), &redis.ZRangeBy{
			Min: strconv.FormatInt(min, 10), Max: strconv.FormatInt(max, 10),
			Offset: int64(from), Count: int64(n),
		}).Result()
		if err != nil {
			return nil, mapErr(ctx, "queue jobs", err)
		}
		if len(ids) == 0 {
			continue
		}
		vals, err := s.client.HMGet(ctx, sh.jobsKey(queue), ids...).Result()
		if err != nil {
			return nil, mapErr(ctx, "queue jobs", err)
		}
		for _, v := range vals {
			str, ok := v.(string)
			if !ok {
				continue // acknowledged between the two reads
			}
			j, err := decodeJob(str)
			if err != nil {
				return nil, err
			}
			out = append(out, j)
		}
	}
	if len(s.shards) > 1 {
		slices.SortFunc(out, func(a, b store.Job) int {
			if c := cmp.Compare(a.ReadyAt, b.ReadyAt); c != 0 {
				return c
			}
			return strings.Compare(a.ID, b.ID)
		})
		out = window(out, offset, limit)
	}
	return out, nil
}
