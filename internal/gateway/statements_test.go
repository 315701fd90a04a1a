package gateway_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/tooling/roundtrip"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
)

// What one intent costs, on the serve path (gateway and worker in one
// process, sharing a pool and a Temporal client): SQL round trips counted
// at the wire (roundtrip.SQL: every message the pool's connections send, so a
// ping, a preparation or a notification counts too; a pipeline is one),
// and Temporal RPCs with a gRPC interceptor on the client (the worker's
// long polls left out). The counts are asserted, so that a change that
// adds a round trip to every intent is seen here first (#18 asks that
// they not grow with the operations declared, #22 and #33 that they
// shrink: a new ticket was 13 SQL round trips, then 5 at the wire, then
// 3, now 2).
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
			View:       func(struct{}) op.Answer { return op.Answer{Body: map[string]string{}} },
			Table:      fmt.Sprintf("extra_%d", i),
			Migrations: keyedTable(fmt.Sprintf("extra_%d", i)),
		}))
	}
	t.Run("with 20 operations declared", func(t *testing.T) { countStatements(t, extra) })
}

type extraRequest struct {
	Name string `json:"name"`
}

// cost is what one request is expected to cost.
type cost struct {
	sql int
	rpc []string // Temporal RPCs, in any order
}

func countStatements(t *testing.T, ops []*op.Operation) {
	sql, rpcs := &roundtrip.SQL{}, &roundtrip.RPCs{}
	s := testenv.NewStack(t, testenv.Options{Wire: sql, Client: rpcs.ClientOptions(), Operations: ops})
	tok := s.Tokens[testenv.TenantA]
	// The token lookup is cached after the first request, and pgx
	// prepares a statement the first time a connection sends it (a round
	// trip of its own): warm both with intents of other keys, so that
	// each count is a steady intent's own.
	s.Do(testenv.Request{Method: "GET", Path: "/v1/tenant", Token: tok})
	// completed waits for the task completion of the run a request just
	// started, which may come after its answer, so that it is not counted
	// as the next request's.
	completed := func() {
		t.Helper()
		var seen []string
		for range 100 {
			if seen = append(seen, rpcs.Take()...); slices.Contains(seen, "RespondWorkflowTaskCompleted") {
				return
			}
			waitABit()
		}
		t.Fatal("the run's task completion never came")
	}
	warm := func(s *testenv.Stack, req testenv.Request, running bool) {
		t.Helper()
		for i := range 3 {
			req.Key = fmt.Sprintf("warm-%s-%d", req.Key, i)
			s.Do(req)
			if running {
				completed()
			}
			s.Do(req)
		}
	}
	warm(s, testenv.Request{Path: "/v1/tickets", Token: tok, Key: "t", Body: ticketBody}, true)
	const orderBody = `{"customer_id":"c-1","items":[{"sku":"SKU-MOUSE","quantity":1}]}`
	warm(s, testenv.Request{Path: "/v1/orders", Token: tok, Key: "o", Body: orderBody}, true)

	count := func(name string, req testenv.Request, status int, want cost) []string {
		t.Helper()
		sql.Take()
		rpcs.Take()
		if r := s.Do(req); r.Status != status {
			t.Fatalf("%s: %d %s", name, r.Status, r.Body)
		}
		gotSQL := sql.Take()
		// The run's last RPCs (the workflow task's completion) may come
		// a moment after the answer: the worker settles the record before
		// it reports to Temporal.
		gotRPC := rpcs.Take()
		for range 100 {
			if len(gotRPC) >= len(want.rpc) {
				break
			}
			waitABit()
			gotRPC = append(gotRPC, rpcs.Take()...)
		}
		t.Logf("%s: %d SQL round trips, Temporal RPCs %v", name, len(gotSQL), gotRPC)
		if len(gotSQL) != want.sql {
			t.Errorf("%s: %d SQL round trips, want %d:\n  %s", name, len(gotSQL), want.sql, strings.Join(gotSQL, "\n  "))
		}
		slices.Sort(gotRPC)
		slices.Sort(want.rpc)
		if !slices.Equal(gotRPC, want.rpc) {
			t.Errorf("%s: Temporal RPCs %v, want %v", name, gotRPC, want.rpc)
		}
		return gotSQL
	}
	ticket := testenv.Request{Path: "/v1/tickets", Token: tok, Key: "cost-1", Body: ticketBody}
	// 2: the claim (one statement: read the record, insert it unless the
	// key is known); and one pipeline: the step's transaction opened
	// (BEGIN, the record's lock, which also checks that the key is not
	// known, and the savepoint), the ticket's INSERT (which the step
	// queued for later: op.Later), the savepoint's release, the key
	// remembered, the record settled, COMMIT and the notification to
	// other processes. No ping: the connections were busy a moment ago.
	// The worker hands the committed record to the waiting request: no
	// read after the wake-up.
	//
	// Temporal: the eager start (the first workflow task comes back in
	// its answer) and the workflow task's completion (the local activity
	// ran inside it). The request was woken before it needed the run's
	// history (starter.HistoryPollAfter).
	trips := count("a new ticket", ticket, 201, cost{sql: 2, rpc: []string{"StartWorkflowExecution", "RespondWorkflowTaskCompleted"}})
	// 2, as a ticket: the claim, with the order's quote (its products'
	// prices, op.Spec.Hint) read in the same pipeline; and one pipeline
	// that opens the step's transaction, writes the order priced from the
	// quote (its lines, the stock with the quote held to each product
	// under its lock, the event; op.Later), finishes the record and
	// commits.
	orderTrips := count("a new order", testenv.Request{Path: "/v1/orders", Token: tok, Key: "cost-order", Body: orderBody}, 201,
		cost{sql: 2, rpc: []string{"StartWorkflowExecution", "RespondWorkflowTaskCompleted"}})
	if !strings.Contains(orderTrips[0], "json_object_agg") {
		t.Errorf("the order's claim carries no quote: %s", orderTrips[0])
	}
	notified := regexp.MustCompile(`COMMIT; .*pg_notify`)
	if last := trips[len(trips)-1]; strings.Contains(last, "pg_notify") {
		t.Errorf("a notification, although no other process listens: %s", last)
	}
	// With a gateway in another process listening, the worker notifies
	// (once it has seen that listener), in the commit's pipeline.
	other := idem.NewStore(s.Pool, idem.Retention{}, nil)
	other.Waiters = &idem.Waiters{}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go other.Listen(ctx, s.DatabaseURL, s.Logger)
	for i := 0; ; i++ {
		sql.Take()
		s.Do(testenv.Request{Path: "/v1/tickets", Token: tok, Key: fmt.Sprintf("listened-%d", i), Body: ticketBody})
		completed()
		if got := sql.Take(); len(got) > 0 && strings.Contains(got[len(got)-1], "pg_notify") {
			break
		}
		if i == 200 {
			t.Fatal("the worker never notified the other process")
		}
		waitABit()
	}
	listened := ticket
	listened.Key = "cost-listened"
	trips = count("a new ticket, another process listening", listened, 201, cost{sql: 2, rpc: []string{"StartWorkflowExecution", "RespondWorkflowTaskCompleted"}})
	if last := trips[len(trips)-1]; !notified.MatchString(last) {
		t.Errorf("the notification is not in the commit's pipeline, after the COMMIT: %s", last)
	}
	// What a pgx tracer missed is counted: a pool's ping.
	conn, err := s.Pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sql.Take()
	if err := conn.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	conn.Release()
	if got := sql.Take(); !slices.Equal(got, []string{"-- ping"}) {
		t.Errorf("a ping: %q", got)
	}
	count("its replay from the answer cache", ticket, 201, cost{})
	s.Gateway.Starter.Answers = nil // a replica without it in memory
	count("its replay from PostgreSQL", ticket, 201, cost{sql: 1})
	changed := ticket
	changed.Body = `{"customer_id":"c-42","title":"Another ticket"}`
	count("the key reused with changed parameters", changed, 422, cost{sql: 1})

	// A duplicate of an intent still running (no worker takes it) is one
	// statement, which finds the record PROCESSING, and one start, which
	// attaches to the run.
	idle := testenv.NewStack(t, testenv.Options{Wire: sql, Client: rpcs.ClientOptions(), Operations: ops, NoWorker: true})
	s = idle
	tok = s.Tokens[testenv.TenantA]
	s.Do(testenv.Request{Method: "GET", Path: "/v1/tenant", Token: tok})
	warm(s, testenv.Request{Path: "/v1/tickets", Token: tok, Key: "i", Body: ticketBody, Header: map[string]string{"Prefer": "wait=0"}}, false)
	first := testenv.Request{Path: "/v1/tickets", Token: tok, Key: "cost-2", Body: ticketBody, Header: map[string]string{"Prefer": "wait=0"}}
	count("a new ticket, answered at once", first, 202, cost{sql: 1, rpc: []string{"StartWorkflowExecution"}})
	count("a duplicate that attaches to it", first, 409, cost{sql: 1, rpc: []string{"StartWorkflowExecution"}})
}

func waitABit() { time.Sleep(20 * time.Millisecond) }
