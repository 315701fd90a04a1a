package migrations_test

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/idemflow/idemflow/internal/registry"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/idemflow/idemflow/migrations"
)

// Processes that start together migrate together, behind PgBouncer in
// transaction pooling too. tern's lock is a session's advisory lock: taken
// through a transaction pooler on one server connection and released on
// another, it stayed held for as long as PgBouncer kept the first, and
// every later migration waited on it for ever. Each migration here must
// end, leave no advisory lock held, and apply each version once.
func TestMigrationsThroughATransactionPoolerEndAndLeaveNoLock(t *testing.T) {
	set, err := registry.New()
	if err != nil {
		t.Fatal(err)
	}
	direct := testenv.EmptyDatabase(t)
	through := testenv.PgBouncer(t, direct, "transaction")
	d, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	database := strings.TrimPrefix(d.Path, "/")

	for round := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, errs[i] = migrations.MigrateURL(ctx, through, set.Schemas()...)
			}()
		}
		wg.Wait()
		cancel()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, process %d: %v", round+1, i+1, err)
			}
		}
		conn, err := pgurl.Connect(context.Background(), direct)
		if err != nil {
			t.Fatal(err)
		}
		var held int
		err = conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
			WHERE l.locktype = 'advisory' AND l.granted AND d.datname = $1`, database).Scan(&held)
		var version int
		if err == nil {
			err = conn.QueryRow(context.Background(), `SELECT version FROM `+migrations.VersionTable).Scan(&version)
		}
		_ = conn.Close(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if held != 0 {
			t.Fatalf("round %d: %d advisory locks still held after every migration ended", round+1, held)
		}
		if version == 0 {
			t.Fatalf("round %d: idemflow's schema at version 0", round+1)
		}
	}
}
