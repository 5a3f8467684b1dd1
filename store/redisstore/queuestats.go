package redisstore

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// QueueDepth reads the queue's ready set: its size, and how many scores
// (ready time, or lease end once claimed) have passed. Of the jobs not yet
// due (few: those held by workers, and delayed ones) it reads the values to
// count the leased ones. With several shards the counts add up.
func (s *Store) QueueDepth(ctx context.Context, queue string, now int64) (store.QueueDepth, error) {
	if !event.ValidName(queue) {
		return store.QueueDepth{}, invalid("queue depth", "queue %q", queue)
	}
	var d store.QueueDepth
	for _, sh := range s.shards {
		var jobs, due *redis.IntCmd
		var later *redis.StringSliceCmd
		_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			jobs = p.ZCard(ctx, sh.readyKey(queue))
			due = p.ZCount(ctx, sh.readyKey(queue), "-inf", strconv.FormatInt(now, 10))
			later = p.ZRangeByScore(ctx, sh.readyKey(queue), &redis.ZRangeBy{Min: "(" + strconv.FormatInt(now, 10), Max: "+inf"})
			return nil
		})
		if err != nil {
			return store.QueueDepth{}, mapErr(ctx, "queue depth", err)
		}
		d.Jobs += jobs.Val()
		d.Due += due.Val()
		if len(later.Val()) == 0 {
			continue
		}
		vals, err := s.client.HMGet(ctx, sh.jobsKey(queue), later.Val()...).Result()
		if err != nil {
			return store.QueueDepth{}, mapErr(ctx, "queue depth", err)
		}
		for _, v := range vals {
			if v, ok := v.(string); ok {
				if j, err := decodeJob(v); err == nil && j.Lease != "" {
					d.Leased++
				}
			}
		}
	}
	return d, nil
}
