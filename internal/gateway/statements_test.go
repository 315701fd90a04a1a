package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/internal/testenv"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
)

// What one intent costs PostgreSQL, counted in statements with a pgx
// QueryTracer on the pool the gateway and the worker share: a new ticket,
// its replay, and a reused key with changed parameters (422). The counts
// are asserted, so that a change that adds a round trip to every intent is
// seen here first (#18 asks that they not grow with the operations
// declared; #22 that they shrink).
//
// The same counts hold with 20 more operations declared: what a new
// intent costs does not grow with the operations a process knows.
func TestStatementsPerIntent(t *testing.T) {
	t.Run("built-ins alone", func(t *testing.T) { countStatements(t, nil) })
	var extra []*op.Operation
	for i := range 20 {
		extra = append(extra, op.Define(op.Spec[extraRequest, struct{}]{
			Name: fmt.Sprintf("extra_%d", i),
			Step: func(context.Context, pgx.Tx, op.In[extraRequest]) (struct{}, error) { return struct{}{}, nil },
			Lookup: func(context.Context, op.Querier, string, string) (struct{}, bool, error) {
				return struct{}{}, false, nil
			},
			View:  func(struct{}) op.Answer { return op.Answer{Body: map[string]string{}} },
			Table: fmt.Sprintf("extra_%d", i),
		}))
	}
	t.Run("with 20 operations declared", func(t *testing.T) { countStatements(t, extra) })
}

type extraRequest struct {
	Name string `json:"name"`
}

func countStatements(t *testing.T, ops []*op.Operation) {
	sql := &testenv.Statements{}
	s := testenv.NewStack(t, testenv.Options{Tracer: sql, Operations: ops})
	tok := s.Tokens[testenv.TenantA]
	// The token lookup is cached after the first request: warm it, so that
	// each count is the intent's own.
	s.Do(testenv.Request{Method: "GET", Path: "/v1/tenant", Token: tok})
	sql.Take()

	count := func(name string, req testenv.Request, status int, want int) {
		t.Helper()
		if r := s.Do(req); r.Status != status {
			t.Fatalf("%s: %d %s", name, r.Status, r.Body)
		}
		got := sql.Take()
		t.Logf("%s: %d statements", name, len(got))
		if len(got) != want {
			t.Errorf("%s: %d statements, want %d:\n  %s", name, len(got), want, strings.Join(got, "\n  "))
		}
	}
	ticket := testenv.Request{Path: "/v1/tickets", Token: tok, Key: "cost-1", Body: ticketBody}
	// 13: the claim (read the record, recall the key, insert the record),
	// the step's transaction (begin, lock, recall, savepoint, insert the
	// ticket, release, remember the key, settle, commit) and the gateway's
	// read of the settled record. Recall is one lookup of idempotency_key,
	// whatever the number of business types (it was one probe per business
	// table, 14 statements with two types).
	count("a new ticket", ticket, 201, 13)
	count("its replay", ticket, 201, 0) // from the gateway's memory
	s.Gateway.Starter.Answers = nil     // a replica without it in memory
	count("its replay from PostgreSQL", ticket, 201, 1)
	changed := ticket
	changed.Body = `{"customer_id":"c-42","title":"Another ticket"}`
	count("the key reused with changed parameters", changed, 422, 1)
}
