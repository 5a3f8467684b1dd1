package redisstore_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/redisstore"
)

// TestCheckpointsFollowTheStream checks the documented key and that
// checkpoints never outlive their stream: none is stored without one, and the
// hash takes the stream's time to live.
func TestCheckpointsFollowTheStream(t *testing.T) {
	prefix := redistest.Prefix(t)
	s, client := newTestStore(t, redisstore.Options{Prefix: prefix})
	ctx := t.Context()
	c := store.Context{Type: "flow", ID: "r1"}
	key := s.KeyPrefixOf("r1") + ":flow:r1:checkpoints"

	if err := s.PutCheckpoint(ctx, c, event.ID{MS: 5}, []byte("s")); err != nil {
		t.Fatalf("PutCheckpoint without a stream: %v", err)
	}
	if _, _, err := s.Checkpoint(ctx, c, event.MaxID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a checkpoint was kept without its stream: %v", err)
	}

	got := mustAppend(t, s, c, event.Event{Kind: "log", Subject: c.ID})
	if err := s.PutCheckpoint(ctx, c, got[0].ID, []byte("s")); err != nil {
		t.Fatal(err)
	}
	if ttl := client.PTTL(ctx, key).Val(); ttl != -1 {
		t.Errorf("PTTL of a checkpoint beside a stream without expiry = %v, want none", ttl)
	}
	if err := client.PExpire(ctx, s.KeyPrefixOf("r1")+":flow:r1", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.PutCheckpoint(ctx, c, got[0].ID, []byte("s2")); err != nil {
		t.Fatal(err)
	}
	if ttl := client.PTTL(ctx, key).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Errorf("PTTL of the checkpoints = %v, want the stream's hour", ttl)
	}
	field := fmt.Sprintf("%020d-%020d", got[0].ID.MS, got[0].ID.Seq)
	if fields := client.HKeys(ctx, key).Val(); len(fields) != 1 || fields[0] != field {
		t.Errorf("HKEYS %s = %q, want [%s]", key, fields, field)
	}
}
