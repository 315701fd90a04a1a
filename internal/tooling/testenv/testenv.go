// Package testenv gives tests the real parts: a fresh PostgreSQL database
// per test on a real server, an embedded Temporal server, and the whole
// service on them assembled as serve assembles it (NewStack, through
// internal/service). A missing server fails the test; it is never
// skipped. The public test kit (idemflowtest) is a layer over it.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/idemflow/idemflow/internal/registry"
	"github.com/idemflow/idemflow/internal/tooling/devserver"
	"github.com/idemflow/idemflow/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultAdminURL is the machine's own PostgreSQL with trust auth.
const DefaultAdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminURL is IDEMFLOW_TEST_DATABASE_URL or DefaultAdminURL.
func AdminURL() string {
	if u := os.Getenv("IDEMFLOW_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultAdminURL
}

// Database creates an empty, migrated database (idemflow's schema, the
// built-in operations' own and schemas) and drops it when the test ends.
// It returns the database's URL.
func Database(t testing.TB, schemas ...migrations.Schema) string {
	t.Helper()
	return DatabaseWith(t, Setup{}, schemas...)
}

// Setup shapes a test database as a user's server may: Create is added to
// CREATE DATABASE (ENCODING 'SQL_ASCII' ...), and each of Settings is set
// on it (ALTER DATABASE ... SET standard_conforming_strings = off) before
// anything connects to it.
//
// Server, when set, is the admin URL of the server the database is made
// on (a test's private primary, or a multi-host URL naming it and its
// standbys, which the database's URL then names too); empty, the suite's
// (AdminURL).
type Setup struct {
	Create   string
	Settings []string
	Server   string
}

// server is the admin URL the database is made on.
func (s Setup) server() string {
	if s.Server != "" {
		return s.Server
	}
	return AdminURL()
}

// DatabaseWith is Database on a database made as setup says.
func DatabaseWith(t testing.TB, setup Setup, schemas ...migrations.Schema) string {
	t.Helper()
	// As 'migrate' does, the built-ins' own migrations (a built-in
	// declared with Migrations) are applied with idemflow's.
	builtins, err := registry.New()
	if err != nil {
		t.Fatal(err)
	}
	all := builtins.Schemas()
	for _, s := range schemas {
		if !slices.ContainsFunc(all, func(b migrations.Schema) bool { return b.Name == s.Name }) {
			all = append(all, s)
		}
	}
	u := emptyDatabase(t, setup)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := migrations.MigrateURL(ctx, u, all...); err != nil {
		t.Fatalf("testenv: migrate: %v", err)
	}
	return u
}

// EmptyDatabase creates a database with no tables (for migration tests)
// and drops it when the test ends. It returns the database's URL.
func EmptyDatabase(t testing.TB) string {
	t.Helper()
	return emptyDatabase(t, Setup{})
}

func emptyDatabase(t testing.TB, setup Setup) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, setup.server())
	if err != nil {
		t.Fatalf("testenv: PostgreSQL at %s is not reachable (run scripts/test.sh, which starts one, or set IDEMFLOW_TEST_DATABASE_URL): %v", setup.server(), err)
	}
	defer admin.Close(context.Background())
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "idemflow_test_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name+" "+setup.Create); err != nil {
		t.Fatalf("testenv: create database: %v", err)
	}
	for _, set := range setup.Settings {
		if _, err := admin.Exec(ctx, "ALTER DATABASE "+name+" SET "+set); err != nil {
			t.Fatalf("testenv: set %s: %v", set, err)
		}
	}
	t.Cleanup(func() { dropDatabases(t, setup.server(), name) })
	u, err := devserver.WithDatabase(setup.server(), name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Pool opens a pool on a fresh database (see Database).
func Pool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	u := Database(t)
	return PoolOn(t, u, func(*pgxpool.Config) {}), u
}

// PoolOn opens a pool on the database at u, configured by configure.
func PoolOn(t testing.TB, u string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgurl.ParsePoolConfig(u)
	if err != nil {
		t.Fatalf("testenv: pool: %v", err)
	}
	configure(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("testenv: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Count returns SELECT count(*) FROM table [WHERE ...].
func Count(t testing.TB, q idem.Querier, table, where string, args ...any) int {
	t.Helper()
	sql := "SELECT count(*) FROM " + table
	if where != "" {
		sql += " WHERE " + where
	}
	var n int
	if err := q.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// DropAtEnd drops the named databases of the suite's server (AdminURL)
// when the test ends, whoever made them: an embedded Temporal's, made
// beside the test's own database.
func DropAtEnd(t testing.TB, names ...string) {
	t.Cleanup(func() { dropDatabases(t, AdminURL(), names...) })
}

// dropDatabases drops the named databases on the server of serverURL,
// their sessions with them, and logs what it could not drop.
func dropDatabases(t testing.TB, serverURL string, names ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		t.Logf("testenv: drop %v: %v", names, err)
		return
	}
	defer conn.Close(context.Background())
	for _, name := range names {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("testenv: drop %s: %v", name, err)
		}
	}
}
