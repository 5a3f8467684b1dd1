package redisstore

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"

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
	err := s.client.ZAddNX(ctx, s.on(id).indexKey(ix), redis.Z{Score: float64(score), Member: id}).Err()
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
	page, err := s.gatherIndex(ctx, func(sh *shard) string { return sh.indexKey(ix) }, offset, limit)
	if err != nil {
		return store.IndexPage{}, mapErr(ctx, "index list", err)
	}
	return page, nil
}

// gatherIndex reads a page of the index that key names on each shard,
// highest score first and equal scores by id ascending (see
// scripts/index_list.lua). With several shards it reads the first
// offset+limit entries of every shard and merges them, and the total is
// the sum of the shards' sizes: each shard's part is read as it is at its
// own moment, so an entry moving between indexes in between may be counted
// in both or neither (as between two pages on one server). A limit of 0
// reads the total only.
func (s *Store) gatherIndex(ctx context.Context, key func(*shard) string, offset, limit int) (store.IndexPage, error) {
	page := store.IndexPage{Entries: []store.IndexEntry{}}
	if limit == 0 {
		cmds := make([]*redis.IntCmd, len(s.shards))
		pipe := s.client.Pipeline()
		for i, sh := range s.shards {
			cmds[i] = pipe.ZCard(ctx, key(sh))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return page, err
		}
		for _, c := range cmds {
			page.Total += c.Val()
		}
		return page, nil
	}
	from, n := offset, limit
	if len(s.shards) > 1 {
		from, n = 0, offset+limit
	}
	for _, sh := range s.shards {
		reply, err := indexListScript.Run(ctx, s.client, []string{key(sh)}, from, n).Slice()
		if err != nil {
			return page, err
		}
		total, _ := reply[0].(int64)
		page.Total += total
		for i := 1; i+1 < len(reply); i += 2 {
			member, _ := reply[i].(string)
			raw, _ := reply[i+1].(string)
			score, err := strconv.ParseFloat(raw, 64)
			if err != nil {
				return page, fmt.Errorf("redisstore: index list: score %q of %q: %w", raw, member, err)
			}
			page.Entries = append(page.Entries, store.IndexEntry{ID: member, Score: int64(score)})
		}
	}
	if len(s.shards) > 1 {
		slices.SortFunc(page.Entries, func(a, b store.IndexEntry) int {
			if c := cmp.Compare(b.Score, a.Score); c != 0 {
				return c
			}
			return strings.Compare(a.ID, b.ID)
		})
		page.Entries = window(page.Entries, offset, limit)
	}
	return page, nil
}
