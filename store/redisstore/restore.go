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

//go:embed scripts/restore.lua
var restoreLua string

var restoreScript = redis.NewScript(restoreLua)

// Restore writes evs with their ids as c's stream, and record as its run
// record, in one script (scripts/restore.lua). The stream is not trimmed to
// MaxLen: an archived run comes back whole. Errors: store.ErrConflict,
// store.ErrInvalid, store.ErrUnavailable, store.ErrClosed.
func (s *Store) Restore(ctx context.Context, c store.Context, evs []event.Event, record *store.RunMeta) error {
	if err := s.checkOpen("restore"); err != nil {
		return err
	}
	stored, err := store.CheckRestore(c, evs, record)
	if err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}

	sh := s.on(c.ID)
	keys := []string{sh.streamKey(c), sh.indexKey(store.Index{Type: c.Type})}
	keyAt := func(k string) int {
		for i, have := range keys {
			if have == k {
				return i + 1
			}
		}
		keys = append(keys, k)
		return len(keys)
	}

	ids := make([]any, len(evs))
	bodies := make([]any, len(evs))
	joins := make([]any, len(evs))
	for i, e := range evs {
		ids[i], bodies[i], joins[i] = formatID(e.ID), stored[i], 0
		if ix, ok := store.JoinedIndex(e); ok {
			if !ix.Valid() {
				return invalid("restore", "%s: event %d: index name %q", c, i, ix.Name)
			}
			joins[i] = keyAt(sh.indexKey(ix))
		}
	}

	args := make([]any, 0, 8+3*len(evs))
	args = append(args, c.ID, len(evs))
	args = append(args, ids...)
	args = append(args, bodies...)
	args = append(args, joins...)
	if record == nil {
		args = append(args, 0, 0, 0)
	} else {
		fields, err := restoredFields(*record)
		if err != nil {
			return invalid("restore", "%s: record: %v", c, err)
		}
		args = append(args, keyAt(sh.metaKey(record.FlowName, record.RunID)), keyAt(sh.statusKey(record.FlowName, record.Status)), record.StartedAt)
		args = append(args, len(fields)/2)
		args = append(args, fields...)
	}

	reply, err := sh.pipe.run(ctx, restoreScript, keys, args)
	if err != nil {
		return mapWriteErr(ctx, "restore", err)
	}
	if code, _ := reply[0].(int64); code != 0 {
		reason, _ := reply[1].(string)
		return fmt.Errorf("redisstore: restore of %s: %w: %s", c, store.ErrConflict, reason)
	}
	return nil
}

// restoredFields is the record hash run_update.lua would have left: the
// fields metaFields writes, without the empty ones it deletes, and the
// version, at least 1 because a stored record has been written once.
func restoredFields(m store.RunMeta) ([]any, error) {
	all, err := metaFields(m)
	if err != nil {
		return nil, err
	}
	out := make([]any, 0, len(all)+2)
	for i := 0; i < len(all); i += 2 {
		if all[i+1] != "" {
			out = append(out, all[i], all[i+1])
		}
	}
	return append(out, "version", strconv.FormatInt(max(m.Version, 1), 10)), nil
}
