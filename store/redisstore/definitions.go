package redisstore

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// PutDefinition stores a flow definition. Errors: store.ErrInvalid,
// store.ErrUnavailable, store.ErrClosed.
func (s *Store) PutDefinition(ctx context.Context, name string, body []byte) error {
	if err := s.checkOpen("put definition"); err != nil {
		return err
	}
	if !event.ValidName(name) {
		return invalid("put definition", "flow name %q", name)
	}
	return mapErr(ctx, "put definition", s.client.HSet(ctx, s.home().defsKey(), name, body).Err())
}

// Definition returns a stored definition. Errors: store.ErrNotFound,
// store.ErrInvalid, store.ErrUnavailable, store.ErrClosed.
func (s *Store) Definition(ctx context.Context, name string) ([]byte, error) {
	if err := s.checkOpen("definition"); err != nil {
		return nil, err
	}
	if !event.ValidName(name) {
		return nil, invalid("definition", "flow name %q", name)
	}
	body, err := s.client.HGet(ctx, s.home().defsKey(), name).Bytes()
	if err != nil {
		return nil, mapErr(ctx, "definition "+name, err)
	}
	return body, nil
}

// DeleteDefinition removes a definition. Errors: store.ErrNotFound,
// store.ErrInvalid, store.ErrUnavailable, store.ErrClosed.
func (s *Store) DeleteDefinition(ctx context.Context, name string) error {
	if err := s.checkOpen("delete definition"); err != nil {
		return err
	}
	if !event.ValidName(name) {
		return invalid("delete definition", "flow name %q", name)
	}
	n, err := s.client.HDel(ctx, s.home().defsKey(), name).Result()
	if err != nil {
		return mapErr(ctx, "delete definition", err)
	}
	if n == 0 {
		return fmt.Errorf("redisstore: definition %s: %w", name, store.ErrNotFound)
	}
	return nil
}

// Definitions returns every stored definition by name. Errors:
// store.ErrUnavailable, store.ErrClosed.
func (s *Store) Definitions(ctx context.Context) (map[string][]byte, error) {
	if err := s.checkOpen("definitions"); err != nil {
		return nil, err
	}
	all, err := s.client.HGetAll(ctx, s.home().defsKey()).Result()
	if err != nil {
		return nil, mapErr(ctx, "definitions", err)
	}
	out := make(map[string][]byte, len(all))
	for k, v := range all {
		out[k] = []byte(v)
	}
	return out, nil
}
