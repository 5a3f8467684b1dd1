package pgstore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// migrations holds the schema, one file per version: NNNN_name.sql. A file
// is applied once, in order, and never edited after release.
//
//go:embed migrations/*.sql
var migrations embed.FS

// migration is one numbered schema change.
type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations() ([]migration, error) {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, path := range names {
		base := strings.TrimPrefix(path, "migrations/")
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %s: name is not NNNN_name.sql", base)
		}
		body, err := migrations.ReadFile(path)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: base, sql: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i, m := range out {
		// Two files of one version (changes made side by side) would apply
		// one and record the other as applied.
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: want version %d: versions run 1, 2, 3… without gaps or repeats", m.name, i+1)
		}
	}
	return out, nil
}

// migrate applies the migrations the schema lacks, all in one transaction
// under an advisory lock, so instances starting together apply each once.
func (s *Store) migrate(ctx context.Context) error {
	all, err := loadMigrations()
	if err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The lock key is per schema: schemas of one database migrate
		// independently.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.nqd_migrate'))`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS nqd_schema_version (
			version    int PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		var current int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM nqd_schema_version`).Scan(&current); err != nil {
			return err
		}
		for _, m := range all {
			if m.version <= current {
				continue
			}
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO nqd_schema_version (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", dbErr(err))
	}
	return nil
}

// SchemaVersion returns the version of the newest migration applied to the
// database. Errors: ErrUnavailable.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM nqd_schema_version`).Scan(&v)
	return v, dbErr(err)
}
