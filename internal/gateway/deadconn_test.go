package gateway_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The pool no longer pings a connection idle for seconds (pgurl.IdlePing),
// so a connection that died while idle is found by the statement that uses
// it. When every connection of the stack died at once (the server
// restarted, or an operator terminated them), the next intents still get
// their answers: the claim is sent again on a live connection, and the
// activity is retried by Temporal. Nothing a ping would have saved fails.
func TestIntentsAfterEveryConnectionDiedAreAnswered(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	tok := s.Tokens[testenv.TenantA]
	for i := range 3 {
		if r := s.Do(testenv.Request{Method: "POST", Path: "/v1/tickets", Key: fmt.Sprintf("dead-warm-%d", i), Token: tok,
			Body: `{"customer_id":"c-1","title":"t"}`}); r.Status != 201 {
			t.Fatalf("warm-up: %d %s", r.Status, r.Body)
		}
	}
	admin := testenv.PoolOn(t, testenv.AdminURL(), func(*pgxpool.Config) {})
	var dbName string
	if err := s.Pool.QueryRow(context.Background(), `SELECT current_database()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	var killed int
	if err := admin.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1`, dbName).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed == 0 {
		t.Fatal("no connection to terminate: the test would prove nothing")
	}
	for i := range 3 {
		r := s.Do(testenv.Request{Method: "POST", Path: "/v1/tickets", Key: fmt.Sprintf("dead-after-%d", i), Token: tok,
			Body: `{"customer_id":"c-1","title":"t"}`})
		if r.Status != 201 {
			t.Fatalf("intent %d after %d connections were terminated: %d %s", i, killed, r.Status, r.Body)
		}
	}
	t.Logf("%d connections terminated; the next intents were answered 201", killed)
}
