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
