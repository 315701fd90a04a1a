package testenv

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/idemflow/idemflow/internal/tooling/devserver"
)

// PrivatePostgres starts a private PostgreSQL of the test's own (not the
// suite's shared server: a test may add standbys to it and change its
// replication settings); it stops when the test ends.
func PrivatePostgres(t *testing.T) *devserver.Postgres {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := devserver.StartPrivatePostgres(context.Background(), t.TempDir(), FreePort(t), quiet)
	if err != nil {
		t.Fatalf("a private PostgreSQL (scripts/test.sh installs the binaries): %v", err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	return p
}

// Standby starts a streaming standby of primary named name
// (pg_basebackup), asynchronous until the primary's
// synchronous_standby_names names it; it stops when the test ends.
func Standby(t *testing.T, primary *devserver.Postgres, name string) *devserver.Postgres {
	t.Helper()
	s, err := primary.StartStandby(context.Background(), t.TempDir(), FreePort(t), name, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

// SynchronousStandbys returns a function that sets the server of
// adminURL's synchronous_standby_names and reloads its configuration:
// "*" with no standby attached makes every commit wait, as on a promoted
// standby that kept its old primary's setting. When the test ends it sets
// "" again; cleanups run last first, so call it after what needs commits
// in its own cleanup (a stack, a database).
func SynchronousStandbys(t testing.TB, adminURL string) func(names string) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgurl.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	set := func(names string) {
		t.Helper()
		for _, sql := range []string{`ALTER SYSTEM SET synchronous_standby_names = '` + names + `'`, `SELECT pg_reload_conf()`} {
			if _, err := admin.Exec(ctx, sql); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() { set(""); _ = admin.Close(context.Background()) })
	return set
}
