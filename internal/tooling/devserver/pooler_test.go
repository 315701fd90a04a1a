package devserver_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/devserver"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/jackc/pgx/v5"
)

// The embedded Temporal's store behind PgBouncer: in transaction pooling
// it refuses at once, naming the fix (before, a first start worked and the
// next failed with SQLSTATE 42P05, or waited on the advisory lock its
// predecessor left on a pooled connection); in session pooling it keeps
// workflows across a restart, as on PostgreSQL itself.
func TestTheEmbeddedTemporalStoreBehindPgBouncer(t *testing.T) {
	db := "idemflow_test_temporal_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), testenv.AdminURL())
		if err != nil {
			t.Log(err)
			return
		}
		defer conn.Close(context.Background())
		for _, n := range []string{db, db + "_visibility"} {
			if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+n+" WITH (FORCE)"); err != nil {
				t.Log(err)
			}
		}
	})
	ctx := context.Background()
	_, err := devserver.StartTemporal(ctx, devserver.TemporalConfig{DataDir: t.TempDir(), Retention: 24 * time.Hour,
		Postgres: testenv.PgBouncer(t, testenv.AdminURL(), "transaction"), PostgresDatabase: db})
	if !errors.Is(err, devserver.ErrSharedSessions) {
		t.Fatalf("the embedded Temporal behind transaction pooling: %v; want ErrSharedSessions, which names the fix", err)
	}

	session := testenv.PgBouncer(t, testenv.AdminURL(), "session")
	for run := range 2 {
		srv, err := devserver.StartTemporal(ctx, devserver.TemporalConfig{DataDir: t.TempDir(), Retention: 24 * time.Hour,
			Postgres: session, PostgresDatabase: db})
		if err != nil {
			t.Fatalf("start %d behind session pooling: %v", run+1, err)
		}
		srv.Stop()
	}
}
