// Package migrations holds idemflow's versioned SQL schema, embedded in the
// binary and applied with tern.
package migrations

import (
	"context"
	"embed"
	"fmt"
	"io/fs"

	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

//go:embed *.sql
var files embed.FS

// Files are the migrations, for tools that drive tern themselves.
func Files() fs.FS { return files }

// VersionTable records which migrations a database has applied.
const VersionTable = "idemflow_schema_version"

// Schema is a declared operation's own migrations, versioned apart from
// idemflow's, in its own version table.
type Schema struct {
	Name  string
	Files fs.FS
}

// VersionTableOf is the version table of a declared operation's schema.
func VersionTableOf(name string) string { return "idemflow_op_" + name + "_schema_version" }

// Migrate applies every pending migration: idemflow's, then each schema's,
// all in one transaction that first takes a transaction-scoped advisory
// lock, so that processes migrating together apply each migration once,
// and a failed migration leaves every schema as it was. from and to are
// idemflow's own versions.
//
// One transaction is also what a transaction pooler (PgBouncer's
// transaction pooling, RDS Proxy) keeps on one server connection: tern's
// own lock is a session's, and taken through such a pooler it was
// released on another server connection than the one that held it, so it
// stayed held and every later migration waited for ever. Inside the
// transaction tern's lock is taken and released on the same session, and
// is never contended. A migration that cannot run in a transaction
// (CREATE INDEX CONCURRENTLY) is therefore refused by PostgreSQL.
func Migrate(ctx context.Context, conn *pgx.Conn, schemas ...Schema) (from, to int32, err error) {
	applied, err := migrateAll(ctx, conn, schemas)
	from, to = own(applied)
	return from, to, err
}

// own is idemflow's own versions among what a migration applied (the
// first, where it got that far).
func own(applied []Applied) (from, to int32) {
	if len(applied) == 0 {
		return 0, 0
	}
	return applied[0].From, applied[0].To
}

// Applied is one schema's versions before and after a migration: "" names
// idemflow's own.
type Applied struct {
	Name     string
	From, To int32
}

// MigrateEach is MigrateURL that says what it did to every schema,
// idemflow's first, so that a team sees its own migration applied.
func MigrateEach(ctx context.Context, databaseURL string, schemas ...Schema) ([]Applied, error) {
	conn, err := pgurl.Connect(ctx, databaseURL)
	if err != nil {
		return nil, fmt.Errorf("migrations: connect: %w", err)
	}
	defer conn.Close(context.Background())
	return migrateAll(ctx, conn, schemas)
}

// lockKey names the transaction-scoped advisory lock a migration holds;
// nothing else in idemflow takes it.
const lockKey = 0x1de3f10e

func migrateAll(ctx context.Context, conn *pgx.Conn, schemas []Schema) (applied []Applied, err error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey); err != nil {
		return nil, fmt.Errorf("migrations: lock: %w", err)
	}
	from, to, err := apply(ctx, tx.Conn(), VersionTable, files)
	applied = []Applied{{From: from, To: to}}
	if err != nil {
		return applied, err
	}
	for _, s := range schemas {
		from, to, err := apply(ctx, tx.Conn(), VersionTableOf(s.Name), s.Files)
		if err != nil {
			return applied, fmt.Errorf("operation %s: %w", s.Name, err)
		}
		applied = append(applied, Applied{Name: s.Name, From: from, To: to})
	}
	if err := tx.Commit(ctx); err != nil {
		return applied, fmt.Errorf("migrations: commit: %w", err)
	}
	return applied, nil
}

// apply runs one schema's pending migrations on conn, inside migrateAll's
// transaction (so tern begins none of its own).
func apply(ctx context.Context, conn *pgx.Conn, versionTable string, files fs.FS) (from, to int32, err error) {
	m, err := migrate.NewMigratorEx(ctx, conn, versionTable, &migrate.MigratorOptions{DisableTx: true})
	if err != nil {
		return 0, 0, fmt.Errorf("migrations: new migrator: %w", err)
	}
	if err := m.LoadMigrations(files); err != nil {
		return 0, 0, fmt.Errorf("migrations: load: %w", err)
	}
	from, err = m.GetCurrentVersion(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("migrations: current version: %w", err)
	}
	if err := m.Migrate(ctx); err != nil {
		return from, 0, fmt.Errorf("migrations: apply: %w", err)
	}
	to, err = m.GetCurrentVersion(ctx)
	if err != nil {
		return from, 0, fmt.Errorf("migrations: current version: %w", err)
	}
	return from, to, nil
}

// MigrateURL connects to databaseURL and applies pending migrations;
// from and to are idemflow's own versions (MigrateEach says every
// schema's).
func MigrateURL(ctx context.Context, databaseURL string, schemas ...Schema) (from, to int32, err error) {
	applied, err := MigrateEach(ctx, databaseURL, schemas...)
	from, to = own(applied)
	return from, to, err
}

// Querier runs a query: a pool or a connection.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Pending counts the migrations, idemflow's and each schema's, that the
// database at q has not applied. It only reads: a version table that does
// not exist yet is a database nothing was applied to.
func Pending(ctx context.Context, q Querier, schemas ...Schema) (int, error) {
	n, err := pending(ctx, q, VersionTable, files)
	if err != nil {
		return 0, err
	}
	for _, s := range schemas {
		m, err := pending(ctx, q, VersionTableOf(s.Name), s.Files)
		if err != nil {
			return 0, fmt.Errorf("operation %s: %w", s.Name, err)
		}
		n += m
	}
	return n, nil
}

func pending(ctx context.Context, q Querier, versionTable string, files fs.FS) (int, error) {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		return 0, fmt.Errorf("migrations: list: %w", err)
	}
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, versionTable).Scan(&exists); err != nil {
		return 0, fmt.Errorf("migrations: look for %s: %w", versionTable, err)
	}
	if !exists {
		return len(names), nil
	}
	// tern numbers migrations from 1, one a file, and keeps the last
	// applied in its version table's one row.
	var version int32
	if err := q.QueryRow(ctx, `SELECT COALESCE((SELECT version FROM `+pgx.Identifier{versionTable}.Sanitize()+` LIMIT 1), 0)`).Scan(&version); err != nil {
		return 0, fmt.Errorf("migrations: read %s: %w", versionTable, err)
	}
	return max(len(names)-int(version), 0), nil
}
