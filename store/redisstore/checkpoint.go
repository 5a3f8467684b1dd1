package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Checkpoints of a context live in one hash beside its stream:
//
//	<p>:<type>:<id>:checkpoints   hash: field "<ms>-<seq>" zero-padded to 20
//	                              digits each, value the encoded state; it
//	                              expires with the stream
//
// Whatever deletes a stream deletes this key with it.

//go:embed scripts/checkpoint_put.lua
var checkpointPutLua string

//go:embed scripts/checkpoint_get.lua
var checkpointGetLua string

var (
	checkpointPutScript = redis.NewScript(checkpointPutLua)
	checkpointGetScript = redis.NewScript(checkpointGetLua)
)

// keepCheckpoints is how many checkpoints a context keeps: the newest serves
// the cache, the older ones time travel to the past.
const keepCheckpoints = 4

func (sh *shard) checkpointsKey(c store.Context) string { return sh.streamKey(c) + ":checkpoints" }

// checkpointField formats id so that byte order is id order.
func checkpointField(id event.ID) string { return fmt.Sprintf("%020d-%020d", id.MS, id.Seq) }

func parseCheckpointField(f string) (event.ID, error) {
	ms, seq, ok := strings.Cut(f, "-")
	if !ok {
		return event.ID{}, event.ErrBadID
	}
	m, err1 := strconv.ParseUint(ms, 10, 64)
	q, err2 := strconv.ParseUint(seq, 10, 64)
	if err1 != nil || err2 != nil {
		return event.ID{}, event.ErrBadID
	}
	return event.ID{MS: m, Seq: q}, nil
}

// PutCheckpoint stores state as c's checkpoint at at and keeps only the newest
// few (scripts/checkpoint_put.lua). A context whose stream does not exist
// gets none. Errors: store.ErrInvalid, store.ErrUnavailable, store.ErrClosed.
func (s *Store) PutCheckpoint(ctx context.Context, c store.Context, at event.ID, state []byte) error {
	if s.closed.Load() {
		return fmt.Errorf("redisstore: put checkpoint: %w", store.ErrClosed)
	}
	if !c.Valid() {
		return invalid("put checkpoint", "context %q", c)
	}
	if at.IsZero() {
		return invalid("put checkpoint", "zero id")
	}
	sh := s.on(c.ID)
	keys := []string{sh.checkpointsKey(c), sh.streamKey(c)}
	err := sh.pipe.call(ctx, checkpointPutScript, keys, []any{checkpointField(at), state, keepCheckpoints}).Err()
	return mapErr(ctx, "put checkpoint", err)
}

// Checkpoint returns c's newest checkpoint at or before atOrBefore. Errors:
// store.ErrNotFound, store.ErrInvalid, store.ErrUnavailable, store.ErrClosed.
func (s *Store) Checkpoint(ctx context.Context, c store.Context, atOrBefore event.ID) (event.ID, []byte, error) {
	if s.closed.Load() {
		return event.ID{}, nil, fmt.Errorf("redisstore: checkpoint: %w", store.ErrClosed)
	}
	if !c.Valid() {
		return event.ID{}, nil, invalid("checkpoint", "context %q", c)
	}
	res, err := checkpointGetScript.Run(ctx, s.client, []string{s.on(c.ID).checkpointsKey(c)}, checkpointField(atOrBefore)).Slice()
	if err != nil {
		return event.ID{}, nil, mapErr(ctx, "checkpoint", err)
	}
	if len(res) != 2 {
		return event.ID{}, nil, fmt.Errorf("redisstore: checkpoint: %d values in the reply", len(res))
	}
	field, _ := res[0].(string)
	state, _ := res[1].(string)
	at, err := parseCheckpointField(field)
	if err != nil {
		return event.ID{}, nil, fmt.Errorf("redisstore: checkpoint field %q: %w", field, err)
	}
	return at, []byte(state), nil
}
