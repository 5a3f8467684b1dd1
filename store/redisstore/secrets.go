package redisstore

import (
	"context"
	"fmt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// secretKey holds a secret nqd made for itself, such as the key that signs
// trigger ids: <p>:engine:secret:<name>, a string written once.
func (sh *shard) secretKey(name string) string { return sh.prefix + ":engine:secret:" + name }

// Secret returns the secret stored under name, storing fresh first when
// there is none, so that every instance on this Redis, and every restart,
// uses the one the first instance wrote. A stored secret is never replaced.
// Errors: ErrInvalid (a bad name or an empty fresh), ErrUnavailable,
// ErrClosed.
func (s *Store) Secret(ctx context.Context, name, fresh string) (string, error) {
	if !event.ValidName(name) || fresh == "" {
		return "", invalid("secret", "name %q", name)
	}
	if s.closed.Load() {
		return "", fmt.Errorf("redisstore: secret: %w", store.ErrClosed)
	}
	key := s.home().secretKey(name)
	// SETNX and then GET: of instances starting together one SETNX wins,
	// and as nothing changes the value afterwards, every GET reads it.
	if err := s.client.SetNX(ctx, key, fresh, 0).Err(); err != nil {
		return "", mapErr(ctx, "secret", err)
	}
	v, err := s.client.Get(ctx, key).Result()
	if err != nil {
		return "", mapErr(ctx, "secret", err)
	}
	return v, nil
}
