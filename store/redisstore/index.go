package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

//go:embed scripts/index_list.lua
var indexListLua string

var indexListScript = redis.NewScript(indexListLua)

// IndexAdd adds id to ix with ZADD NX, so a member keeps its first score.
// Errors: store.ErrInvalid, store.ErrUnavailable, store.ErrClosed.
func (s *Store) IndexAdd(ctx context.Context, ix store.Index, id string, score int64) error {
	if s.closed.Load() {
		return fmt.Errorf("redisstore: index add: %w", store.ErrClosed)
	}
	if !ix.Valid() {
		return invalid("index add", "index %+v", ix)
	}
	if !event.ValidName(id) {
		return invalid("index add", "member %q", id)
	}
	err := s.client.ZAddNX(ctx, s.indexKey(ix), redis.Z{Score: float64(score), Member: id}).Err()
	return mapErr(ctx, "index add", err)
}

// IndexList returns a page of ix, highest score first and equal scores by id
// ascending (see scripts/index_list.lua). A limit of 0 returns no entries,
// only the total. Errors: store.ErrInvalid, store.ErrUnavailable,
// store.ErrClosed.
func (s *Store) IndexList(ctx context.Context, ix store.Index, offset, limit int) (store.IndexPage, error) {
	if s.closed.Load() {
		return store.IndexPage{}, fmt.Errorf("redisstore: index list: %w", store.ErrClosed)
	}
	if !ix.Valid() {
		return store.IndexPage{}, invalid("index list", "index %+v", ix)
	}
	if offset < 0 || limit < 0 {
		return store.IndexPage{}, invalid("index list", "offset %d, limit %d", offset, limit)
	}
	key := s.indexKey(ix)
	if limit == 0 {
		total, err := s.client.ZCard(ctx, key).Result()
		if err != nil {
			return store.IndexPage{}, mapErr(ctx, "index list", err)
		}
		return store.IndexPage{Entries: []store.IndexEntry{}, Total: total}, nil
	}
	reply, err := indexListScript.Run(ctx, s.client, []string{key}, offset, limit).Slice()
	if err != nil {
		return store.IndexPage{}, mapErr(ctx, "index list", err)
	}
	total, _ := reply[0].(int64)
	page := store.IndexPage{Entries: make([]store.IndexEntry, 0, (len(reply)-1)/2), Total: total}
	for i := 1; i+1 < len(reply); i += 2 {
		member, _ := reply[i].(string)
		raw, _ := reply[i+1].(string)
		score, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return store.IndexPage{}, fmt.Errorf("redisstore: index list: score %q of %q: %w", raw, member, err)
		}
		page.Entries = append(page.Entries, store.IndexEntry{ID: member, Score: int64(score)})
	}
	return page, nil
}
