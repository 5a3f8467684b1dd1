package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// PutDefinition stores a flow definition. Errors: ErrInvalid, ErrClosed,
// ErrUnavailable.
func (s *Store) PutDefinition(ctx context.Context, name string, body []byte) error {
	if !event.ValidName(name) {
		return invalid("flow name %q", name)
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, sqlDefinitionPut, name, body)
	return dbErr(err)
}

// Definition returns a stored definition. Errors: ErrNotFound, ErrInvalid,
// ErrClosed, ErrUnavailable.
func (s *Store) Definition(ctx context.Context, name string) ([]byte, error) {
	if !event.ValidName(name) {
		return nil, invalid("flow name %q", name)
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	var body []byte
	err := s.pool.QueryRow(ctx, `SELECT body FROM nqd_definitions WHERE name = $1`, name).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgstore: flow %q: %w", name, store.ErrNotFound)
	}
	return body, dbErr(err)
}

// DeleteDefinition removes a definition. Errors: ErrNotFound, ErrInvalid,
// ErrClosed, ErrUnavailable.
func (s *Store) DeleteDefinition(ctx context.Context, name string) error {
	if !event.ValidName(name) {
		return invalid("flow name %q", name)
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM nqd_definitions WHERE name = $1`, name)
	if err != nil {
		return dbErr(err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("pgstore: flow %q: %w", name, store.ErrNotFound)
	}
	return nil
}

// Definitions returns every stored definition by name. Errors: ErrClosed,
// ErrUnavailable.
func (s *Store) Definitions(ctx context.Context) (map[string][]byte, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT name, body FROM nqd_definitions`)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	out := map[string][]byte{}
	for rows.Next() {
		var name string
		var body []byte
		if err := rows.Scan(&name, &body); err != nil {
			return nil, dbErr(err)
		}
		out[name] = body
	}
	return out, dbErr(rows.Err())
}
