package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/nqd-dev/nqd/internal/pgtest"
)

func TestSchemasAreSeparate(t *testing.T) {
	t.Parallel()
	a, b := pgtest.URL(t), pgtest.URL(t)
	ctx := context.Background()
	for _, u := range []string{a, b} {
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close(ctx) }()
		if _, err := conn.Exec(ctx, "CREATE TABLE t (n int)"); err != nil {
			t.Fatalf("create table in %s: %v", u, err)
		}
	}
}

func TestDedicatedServer(t *testing.T) {
	t.Parallel()
	s := pgtest.Start(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT 41 + 1").Scan(&n); err != nil || n != 42 {
		t.Fatalf("SELECT 41 + 1 = %d, %v", n, err)
	}
	_ = conn.Close(ctx)
	s.Kill()
	if _, err := pgx.Connect(ctx, s.URL); err == nil {
		t.Fatal("connected to a killed server")
	}
}
