package pgurl_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Behind PgBouncer, a process's pool finds server connections that an
// earlier process (a restart, another replica) left in the pool. With
// pgx's default statement cache, each had prepared its statements under
// names the next process's cache picks again, and every statement of the
// next one failed: `prepared statement "stmtcache_…" already exists`
// (SQLSTATE 42P05). Transaction pooling runs no reset between clients, so
// it is the pooling that broke; session pooling is here too, to stay
// working.
func TestAPoolBehindPgBouncerWorksAfterAnotherLeftItsConnections(t *testing.T) {
	for _, mode := range []string{"transaction", "session"} {
		t.Run(mode, func(t *testing.T) {
			bouncer := testenv.PgBouncer(t, testenv.AdminURL(), mode)
			for i := range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				cfg, err := pgurl.ParsePoolConfig(bouncer)
				if err != nil {
					t.Fatal(err)
				}
				pool, err := pgxpool.NewWithConfig(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				var n int
				if err := pool.QueryRow(ctx, `SELECT $1::int + 1`, i).Scan(&n); err != nil || n != i+1 {
					t.Fatalf("process %d: a statement with a parameter: %d %v", i+1, n, err)
				}
				b := &pgx.Batch{}
				b.Queue(`SELECT $1::text`, "a")
				b.Queue(`SELECT $1::int * 2`, i)
				if err := pool.SendBatch(ctx, b).Close(); err != nil {
					t.Fatalf("process %d: a batch: %v", i+1, err)
				}
				err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					return tx.QueryRow(ctx, `SELECT $1::int + 1`, i).Scan(&n)
				})
				if err != nil {
					t.Fatalf("process %d: a transaction: %v", i+1, err)
				}
				pool.Close()
				cancel()
			}
		})
	}
}

// SharesSessions tells a transaction pooler from PostgreSQL itself and
// from session pooling, whose clients each keep their server connection.
func TestSharesSessionsFindsTransactionPooling(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []struct {
		name, url string
		want      bool
	}{
		{"direct", testenv.AdminURL(), false},
		{"session", testenv.PgBouncer(t, testenv.AdminURL(), "session"), false},
		{"transaction", testenv.PgBouncer(t, testenv.AdminURL(), "transaction"), true},
	} {
		for range 3 {
			got, err := pgurl.SharesSessions(ctx, c.url)
			if err != nil || got != c.want {
				t.Fatalf("%s: SharesSessions = %v, %v; want %v", c.name, got, err, c.want)
			}
		}
	}
}
