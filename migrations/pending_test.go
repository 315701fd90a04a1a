package migrations_test

import (
	"context"
	"io/fs"
	"testing"

	"github.com/idemflow/idemflow/internal/registry"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/idemflow/idemflow/migrations"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pending counts what a role waits for at start: every migration on a
// database nothing was applied to, idemflow's and each operation's, and
// none once migrate ran, and one where the database is one migration
// behind. It writes nothing: the version table is still
// absent after it.
func TestPendingCountsWhatMigrateWouldApply(t *testing.T) {
	set, err := registry.New()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	u := testenv.EmptyDatabase(t)
	pool := testenv.PoolOn(t, u, func(*pgxpool.Config) {})
	want := 0
	for _, f := range append([]fs.FS{migrations.Files()}, schemaFiles(set.Schemas())...) {
		names, err := fs.Glob(f, "*.sql")
		if err != nil {
			t.Fatal(err)
		}
		want += len(names)
	}
	if n, err := migrations.Pending(ctx, pool, set.Schemas()...); err != nil || n != want || want == 0 {
		t.Fatalf("before migrate: %d pending (%v), want %d", n, err, want)
	}
	if n := testenv.Count(t, pool, "pg_class", "relname = $1", migrations.VersionTable); n != 0 {
		t.Fatalf("Pending made %s", migrations.VersionTable)
	}
	if _, err := migrations.MigrateEach(ctx, u, set.Schemas()...); err != nil {
		t.Fatal(err)
	}
	if n, err := migrations.Pending(ctx, pool, set.Schemas()...); err != nil || n != 0 {
		t.Fatalf("after migrate: %d pending (%v)", n, err)
	}
	// A database one release behind: its last migration is pending.
	if _, err := pool.Exec(ctx, "UPDATE "+migrations.VersionTable+" SET version = version - 1"); err != nil {
		t.Fatal(err)
	}
	if n, err := migrations.Pending(ctx, pool, set.Schemas()...); err != nil || n != 1 {
		t.Fatalf("one release behind: %d pending (%v), want 1", n, err)
	}
}

func schemaFiles(schemas []migrations.Schema) []fs.FS {
	var out []fs.FS
	for _, s := range schemas {
		out = append(out, s.Files)
	}
	return out
}
