package metrics_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/metrics"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/jackc/pgx/v5/pgxpool"
)

// With PostgreSQL down, a scrape fails (the target shows down), but its
// body never carries the driver's error, which names the database's user,
// name and host.
func TestAFailedProcessingReadNeverShowsTheDatabaseError(t *testing.T) {
	reg := metrics.New()
	defer reg.Close()
	var logged strings.Builder
	reg.WatchProcessing(slog.New(slog.NewTextHandler(&logged, nil)), func(context.Context) (int, time.Duration, error) {
		return 0, 0, errors.New("failed to connect to `user=billing_admin database=prod_idemflow`: db.internal.example:5432: connection refused")
	})
	rec := httptest.NewRecorder()
	reg.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code < 500 {
		t.Errorf("scrape answered %d with the read failing", rec.Code)
	}
	for _, secret := range []string{"billing_admin", "prod_idemflow", "db.internal"} {
		if strings.Contains(string(body), secret) {
			t.Errorf("the scrape shows %q:\n%s", secret, body)
		}
	}
	if !strings.Contains(logged.String(), "billing_admin") {
		t.Errorf("the error is not in the log either: %q", logged.String())
	}
}

// The pool's statistics are served: how many acquires, how long they
// took, and how many found the pool empty; bench's accounting reads them.
func TestThePoolsAcquiresAreServed(t *testing.T) {
	reg := metrics.New()
	defer reg.Close()
	pool := testenv.PoolOn(t, testenv.AdminURL(), func(c *pgxpool.Config) { c.MaxConns = 1 })
	reg.WatchPool(pool)
	for range 3 {
		if _, err := pool.Exec(context.Background(), "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	reg.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{`pgxpool_acquire_count{pool="idemflow"} 3`, `pgxpool_max_conns{pool="idemflow"} 1`, `pgxpool_empty_acquire_wait_time_ns{pool="idemflow"}`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
}
