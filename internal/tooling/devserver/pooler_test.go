package devserver_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/devserver"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// The embedded Temporal's store behind PgBouncer: in transaction pooling
// it refuses at once, naming the fix (before, a first start worked and the
// next failed with SQLSTATE 42P05, or waited on the advisory lock its
// predecessor left on a pooled connection); in session pooling it keeps
// workflows across a restart, as on PostgreSQL itself.
func TestTheEmbeddedTemporalStoreBehindPgBouncer(t *testing.T) {
	db := "idemflow_test_temporal_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	testenv.DropAtEnd(t, db, db+"_visibility")
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
