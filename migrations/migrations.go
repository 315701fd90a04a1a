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

// Migrate applies every pending migration: idemflow's, then each schema's.
// tern holds an advisory lock while it runs, so workers and gateways
// starting together apply each migration once. from and to are idemflow's
// own versions.
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

func migrateAll(ctx context.Context, conn *pgx.Conn, schemas []Schema) ([]Applied, error) {
	from, to, err := apply(ctx, conn, VersionTable, files)
	applied := []Applied{{From: from, To: to}}
	if err != nil {
		return applied, err
	}
	for _, s := range schemas {
		from, to, err := apply(ctx, conn, VersionTableOf(s.Name), s.Files)
		if err != nil {
			return applied, fmt.Errorf("operation %s: %w", s.Name, err)
		}
		applied = append(applied, Applied{Name: s.Name, From: from, To: to})
	}
	return applied, nil
}

func apply(ctx context.Context, conn *pgx.Conn, versionTable string, files fs.FS) (from, to int32, err error) {
	m, err := migrate.NewMigrator(ctx, conn, versionTable)
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
