package boltstore

import (
	"bytes"
	"context"
	"fmt"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
	bolt "go.etcd.io/bbolt"
)

// PutDefinition stores a flow definition. Errors: ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) PutDefinition(ctx context.Context, name string, body []byte) error {
	if !event.ValidName(name) {
		return invalid("flow name %q", name)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return dbErr(s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bFlowDefs)
		if err != nil {
			return err
		}
		return b.Put([]byte(name), bytes.Clone(body))
	}))
}

// Definition returns a stored definition. Errors: ErrNotFound, ErrInvalid,
// ErrClosed, ErrUnavailable.
func (s *Store) Definition(ctx context.Context, name string) ([]byte, error) {
	if !event.ValidName(name) {
		return nil, invalid("flow name %q", name)
	}
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bFlowDefs); b != nil {
			out = bytes.Clone(b.Get([]byte(name)))
		}
		return nil
	})
	if err != nil {
		return nil, dbErr(err)
	}
	if out == nil {
		return nil, fmt.Errorf("boltstore: flow %q: %w", name, store.ErrNotFound)
	}
	return out, nil
}

// DeleteDefinition removes a definition. Errors: ErrNotFound, ErrInvalid,
// ErrClosed, ErrUnavailable.
func (s *Store) DeleteDefinition(ctx context.Context, name string) error {
	if !event.ValidName(name) {
		return invalid("flow name %q", name)
	}
	found := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bFlowDefs)
		if b == nil || b.Get([]byte(name)) == nil {
			return nil
		}
		found = true
		return b.Delete([]byte(name))
	})
	if err != nil {
		return dbErr(err)
	}
	if !found {
		return fmt.Errorf("boltstore: flow %q: %w", name, store.ErrNotFound)
	}
	return nil
}

// Definitions returns every stored definition by name. Errors: ErrClosed,
// ErrUnavailable.
func (s *Store) Definitions(ctx context.Context) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bFlowDefs)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			out[string(k)] = bytes.Clone(v)
			return nil
		})
	})
	return out, dbErr(err)
}
