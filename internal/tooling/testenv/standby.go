package testenv

import (
	"context"
	"io"
	"log/slog"
	"testing"

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
