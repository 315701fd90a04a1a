package gateway_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The pool does not ping a connection idle for seconds (pgurl.IdlePing).
// When every connection of the stack died at once (the server restarted,
// or an operator terminated them), the next requests still get their
// answers, whatever their first statement: the pool hands out no
// connection the server ended (a read and intents alike, authentication
// first), and Temporal retries an activity's.
func TestIntentsAfterEveryConnectionDiedAreAnswered(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	tok := s.Tokens[testenv.TenantA]
	var location string
	for i := range 3 {
		r := s.Do(testenv.Request{Method: "POST", Path: "/v1/tickets", Key: fmt.Sprintf("dead-warm-%d", i), Token: tok,
			Body: `{"customer_id":"c-1","title":"t"}`})
		if r.Status != 201 {
			t.Fatalf("warm-up: %d %s", r.Status, r.Body)
		}
		location = r.Header.Get("Location")
	}
	admin := testenv.PoolOn(t, testenv.AdminURL(), func(*pgxpool.Config) {})
	var dbName string
	if err := s.Pool.QueryRow(context.Background(), `SELECT current_database()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	var pids []int32
	if err := admin.QueryRow(context.Background(), `WITH theirs AS MATERIALIZED (SELECT pid FROM pg_stat_activity WHERE datname = $1)
		SELECT array_agg(pid) FROM theirs WHERE pg_terminate_backend(pid)`, dbName).Scan(&pids); err != nil {
		t.Fatal(err)
	}
	if len(pids) == 0 {
		t.Fatal("no connection to terminate: the test would prove nothing")
	}
	// pg_terminate_backend only signals: the backends are gone, and their
	// sockets closed, when they leave pg_stat_activity.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var left int
		if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, pids).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d terminated backends still there after 10 s", left, len(pids))
		}
	}
	// Authentication is the first statement of every request: a read
	// (GET) and intents.
	if r := s.Do(testenv.Request{Method: "GET", Path: location, Token: tok}); r.Status != 200 {
		t.Fatalf("a read after %d connections were terminated: %d %s", len(pids), r.Status, r.Body)
	}
	for i := range 3 {
		r := s.Do(testenv.Request{Method: "POST", Path: "/v1/tickets", Key: fmt.Sprintf("dead-after-%d", i), Token: tok,
			Body: `{"customer_id":"c-1","title":"t"}`})
		if r.Status != 201 {
			t.Fatalf("intent %d after %d connections were terminated: %d %s", i, len(pids), r.Status, r.Body)
		}
	}
	t.Logf("%d connections terminated; a read was answered 200 and the next intents 201", len(pids))
}
