package redisstore

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

var _ store.QueueStats = (*Store)(nil)

// QueueDepth reads the queue's ready set: its size, and how many scores
// (ready time, or lease end once claimed) have passed.
func (s *Store) QueueDepth(ctx context.Context, queue string, now int64) (store.QueueDepth, error) {
	if !event.ValidName(queue) {
		return store.QueueDepth{}, invalid("queue depth", "queue %q", queue)
	}
	var jobs, due *redis.IntCmd
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		jobs = p.ZCard(ctx, s.readyKey(queue))
		due = p.ZCount(ctx, s.readyKey(queue), "-inf", strconv.FormatInt(now, 10))
		return nil
	})
	if err != nil {
		return store.QueueDepth{}, mapErr(ctx, "queue depth", err)
	}
	return store.QueueDepth{Jobs: jobs.Val(), Due: due.Val()}, nil
}
