package gateway_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/idemflow/idemflow/internal/service"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/jackc/pgx/v5/pgxpool"
)

// idemflow behind PgBouncer in transaction pooling (most hosted
// PostgreSQL, RDS Proxy), with no parameter added to its URL: the
// database is made, migrated and served through the pooler. A second
// replica opens its pool on the server connections the first left there
// (before, every statement of a restarted process failed with SQLSTATE
// 42P05), and has no worker of its own: ten concurrent duplicates sent
// to both replicas wait and attach to one run, one ticket, one answer,
// though no notification passes the pooler (the replica's Listen stands
// down and its waits learn of the settle from Temporal's history poll).
func TestTwoReplicasServeBehindPgBouncerInTransactionPooling(t *testing.T) {
	bouncer := testenv.PgBouncer(t, testenv.AdminURL(), "transaction")
	s := testenv.NewStack(t, testenv.Options{Database: testenv.Setup{Server: bouncer}})
	tok := s.Tokens[testenv.TenantA]
	body := `{"customer_id":"c-1","title":"pooled"}`
	first := s.Do(testenv.Request{Path: "/v1/tickets", Token: tok, Key: "pooled-1", Body: body})
	if first.Status != 201 {
		t.Fatalf("first intent: %d %s", first.Status, first.Body)
	}
	if r := s.Do(testenv.Request{Path: "/v1/tickets", Token: tok, Key: "pooled-1", Body: body}); r.Status != 201 ||
		r.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(r.Body, first.Body) {
		t.Fatalf("its replay: %d replayed %q %s", r.Status, r.Header.Get("Idempotent-Replayed"), r.Body)
	}

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pool := testenv.PoolOn(t, s.DatabaseURL, func(*pgxpool.Config) {})
	replica := service.New(service.Config{Pool: pool, Temporal: s.Temporal, Set: s.Set, Logger: s.Logger, Searchable: true})
	replica.Notify(ctx, service.Roles{Gateway: true}, s.DatabaseURL, pool, testenv.WatchInterval)
	srv := httptest.NewServer(replica.Gateway().Handler())
	t.Cleanup(srv.Close)

	if r := testenv.Do(t, srv.URL, testenv.Request{Path: "/v1/tickets", Token: tok, Key: "pooled-1", Body: body}); r.Status != 201 ||
		r.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(r.Body, first.Body) {
		t.Fatalf("the replay from the second replica: %d replayed %q %s", r.Status, r.Header.Get("Idempotent-Replayed"), r.Body)
	}
	dup := testenv.Request{Path: "/v1/tickets", Token: tok, Key: "pooled-2", Body: `{"customer_id":"c-1","title":"raced"}`}
	answers := make([]testenv.Response, 10)
	errs := make([]error, len(answers))
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := s.URL
			if i%2 == 1 {
				base = srv.URL
			}
			answers[i], errs[i] = testenv.Send(base, dup)
		}()
	}
	wg.Wait()
	for i, r := range answers {
		if errs[i] != nil || r.Status != 201 {
			t.Fatalf("duplicate %d: %d %s %v", i+1, r.Status, r.Body, errs[i])
		}
		if !bytes.Equal(r.Body, answers[0].Body) {
			t.Fatalf("duplicate %d answered %s, duplicate 1 %s", i+1, r.Body, answers[0].Body)
		}
	}
	if n := testenv.Count(t, s.Pool, "ticket", ""); n != 2 {
		t.Fatalf("%d tickets, want 2: one per key", n)
	}
}
