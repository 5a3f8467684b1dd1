package pgstore

import (
	"context"

	"github.com/nqd-dev/nqd/event"
)

// Secret returns the secret stored under name, storing fresh first when
// there is none, so that every instance on this database, and every
// restart, uses the one the first instance wrote. A stored secret is never
// replaced. Errors: ErrInvalid (a bad name or an empty fresh),
// ErrUnavailable, ErrClosed.
func (s *Store) Secret(ctx context.Context, name, fresh string) (string, error) {
	if !event.ValidName(name) || fresh == "" {
		return "", invalid("secret name %q", name)
	}
	if err := s.ready(ctx); err != nil {
		return "", err
	}
	// Two statements: a SELECT in the INSERT's statement would not see a
	// row that a concurrent instance committed while the INSERT waited.
	if _, err := s.pool.Exec(ctx, `INSERT INTO nqd_secret (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, name, fresh); err != nil {
		return "", dbErr(err)
	}
	var v string
	if err := s.pool.QueryRow(ctx, `SELECT value FROM nqd_secret WHERE name = $1`, name).Scan(&v); err != nil {
		return "", dbErr(err)
	}
	return v, nil
}
