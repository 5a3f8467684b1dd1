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

func TestDedicatedServerKillAndRestart(t *testing.T) {
	t.Parallel()
	s := pgtest.Start(t)
	ctx := context.Background()
	exec := func(sql string) error {
		conn, err := pgx.Connect(ctx, s.URL)
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(ctx) }()
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec("CREATE TABLE kept (n int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := exec("SELECT 1"); err == nil {
		t.Fatal("a killed server answered")
	}
	s.Restart(t)
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var n int
	if err := conn.QueryRow(ctx, "SELECT n FROM kept").Scan(&n); err != nil || n != 42 {
		t.Fatalf("after restart: n = %d, %v; want the committed 42", n, err)
	}
}
