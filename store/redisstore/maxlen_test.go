package redisstore_test

import (
	"errors"
	"testing"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/redisstore"
)

// TestMaxLenByType: a type's cap trims its streams (approximately, as XADD
// MAXLEN ~ does, in whole stream nodes) while other types keep every event.
func TestMaxLenByType(t *testing.T) {
	prefix := redistest.Prefix(t)
	s, client := newTestStore(t, redisstore.Options{Prefix: prefix, MaxLenByType: map[string]int64{"trigger": 10}})
	batch := make([]event.Event, 100)
	for i := range batch {
		batch[i] = event.Event{Kind: "log"}
	}
	for range 10 {
		for _, c := range []store.Context{{Type: "trigger", ID: "t1"}, {Type: "flow", ID: "r1"}} {
			if _, err := s.Append(t.Context(), c, batch, store.AppendOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	capped := client.XLen(t.Context(), s.KeyPrefixOf("t1")+":trigger:t1").Val()
	kept := client.XLen(t.Context(), s.KeyPrefixOf("r1")+":flow:r1").Val()
	if kept != 1000 || capped >= 500 || capped < 10 {
		t.Fatalf("after 1,000 events each: trigger stream %d (capped at ~10), flow stream %d (uncapped)", capped, kept)
	}
}

func TestMaxLenByTypeRejectsBadTypes(t *testing.T) {
	client := redistest.Client(t)
	for _, m := range []map[string]int64{{"a:b": 10}, {"flow": -1}} {
		if _, err := redisstore.New(client, redisstore.Options{Prefix: "nqx", MaxLenByType: m}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("MaxLenByType %v: got %v, want ErrInvalid", m, err)
		}
	}
}
