//go:build !nodev

package cli_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/jackc/pgx/v5"
)

// An idle dev stack holds at most 30 PostgreSQL connections, its embedded
// Temporal server's included, also after a burst of load: two stacks and
// the tests fit a default server's max_connections of 100 (at Temporal's
// sample pool sizes one stack held 39 idle, 54 after the bench).
func TestAnIdleDevStackHoldsAtMost30Connections(t *testing.T) {
	dbURL := testenv.Database(t)
	dropTemporalDatabases(t, dbURL)
	dir := t.TempDir()
	dev := startDev(t, dbURL, "--data-dir", dir, "--http-addr", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
		"--temporal-port", fmt.Sprint(testenv.FreePort(t)), "--ui-port", fmt.Sprint(testenv.FreePort(t)))
	dev.WaitUp(t, 2*time.Minute)
	cfg, err := pgurl.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(context.Background(), testenv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	count := func() int {
		t.Helper()
		var n int
		if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE datname IN ($1, $2, $3)`,
			cfg.Database, cfg.Database+"_temporal", cfg.Database+"_temporal_visibility").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	atStart := count()
	env := readEnvFile(t, dir+"/dev.env")
	var wg sync.WaitGroup
	for c := range 32 {
		wg.Go(func() {
			for i := range 4 {
				_, _ = testenv.Send(env["IDEMFLOW_URL"], testenv.Request{Path: "/v1/tickets", Token: env["IDEMFLOW_TOKEN"],
					Key: fmt.Sprintf("load-%d-%d", c, i), Body: `{"customer_id":"c","title":"t"}`})
			}
		})
	}
	wg.Wait()
	time.Sleep(5 * time.Second) // idle again
	after := count()
	t.Logf("connections of the dev stack: %d idle at start, %d idle after 128 tickets from 32 clients", atStart, after)
	if atStart > 30 || after > 30 {
		t.Fatalf("an idle dev stack holds %d connections at start and %d after a burst, want at most 30", atStart, after)
	}
}
