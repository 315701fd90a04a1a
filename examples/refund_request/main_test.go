//go:build !nodev

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemflow/idemflow"
	"github.com/idemflow/idemflow/internal/mcpserver"
	"github.com/idemflow/idemflow/internal/testenv"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMain lets the test binary run as this program (testenv.ChildEnv), so
// that a test can kill its worker like a real one.
func TestMain(m *testing.M) {
	testenv.Main(m, func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		return idemflow.Run(ctx, args, stdout, stderr, Operation)
	})
}

const path = "/v1/refund_request"

var body = `{"payment_id":"pay-1","amount_cents":2500,"reason":"damaged"}`

func send(s *testenv.Stack, tenant, key, body string) testenv.Response {
	return s.Do(testenv.Request{Path: path, Token: s.Tokens[tenant], Key: key, Body: body})
}

func rows(t *testing.T, s *testenv.Stack, where string, args ...any) int {
	t.Helper()
	return testenv.Count(t, s.Pool, "refund_request", where, args...)
}

func problemType(t *testing.T, r testenv.Response) string {
	t.Helper()
	var p struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("not a problem: %d %s", r.Status, r.Body)
	}
	return p.Type
}

// The team's operation, declared in main.go alone, gets what a built-in
// gets: a route in the served contract, a byte-identical replay, a 422 on
// changed parameters (also after a purge, and across operations), a
// precise 400 from its schema with nothing written, its business
// rejection, and tenant isolation.
func TestTheDeclaredOperationIsExactlyOnceOverHTTP(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{Operations: []*op.Operation{Operation}})
	s.Gateway.Starter.Answers = nil // answer from PostgreSQL, as another replica would

	first := send(s, testenv.TenantA, "r-1", body)
	if first.Status != http.StatusCreated || first.Header.Get("Idempotent-Replayed") != "false" {
		t.Fatalf("first: %d %v %s", first.Status, first.Header, first.Body)
	}
	again := send(s, testenv.TenantA, "r-1", body)
	if again.Status != http.StatusCreated || !bytes.Equal(again.Body, first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %v %s", again.Status, again.Header, again.Body)
	}
	changed := send(s, testenv.TenantA, "r-1", `{"payment_id":"pay-1","amount_cents":9900}`)
	if changed.Status != http.StatusUnprocessableEntity || problemType(t, changed) != "/problems/idempotency-key-reused" {
		t.Fatalf("changed parameters: %d %s", changed.Status, changed.Body)
	}
	if n := rows(t, s, "idem_key = 'r-1'"); n != 1 {
		t.Fatalf("%d rows for r-1", n)
	}

	// The schema derived from Request and its Rules is enforced: each
	// failing rule is named, and nothing is recorded.
	for name, bad := range map[string]string{
		"amount_cents":  `{"payment_id":"pay-1","amount_cents":0}`,
		"payment_id":    `{"payment_id":"pay 1!","amount_cents":5}`,
		"reason":        `{"payment_id":"pay-1","amount_cents":5,"reason":"` + strings.Repeat("x", 501) + `"}`,
		"unknown field": `{"payment_id":"pay-1","amount_cents":5,"currency":"EUR"}`,
		"missing":       `{"amount_cents":5}`,
		"wrong type":    `{"payment_id":"pay-1","amount_cents":"5"}`,
	} {
		r := send(s, testenv.TenantA, "bad-"+strings.ReplaceAll(name, " ", "-"), bad)
		if r.Status != http.StatusBadRequest || problemType(t, r) != "/problems/invalid-request" {
			t.Errorf("%s: %d %s", name, r.Status, r.Body)
		}
		if field := strings.Fields(name)[0]; !strings.Contains(name, " ") && name != "missing" && !bytes.Contains(r.Body, []byte(`"field":"`+field+`"`)) {
			t.Errorf("%s: the answer does not name the field: %s", name, r.Body)
		}
	}
	if n := testenv.Count(t, s.Pool, "idempotency_record", "idem_key LIKE 'bad-%'"); n != 0 {
		t.Fatalf("bad input recorded %d intents", n)
	}

	// A business rejection rolls the step back and is the stored answer.
	big := send(s, testenv.TenantA, "r-big", `{"payment_id":"pay-1","amount_cents":999000}`)
	if big.Status != http.StatusUnprocessableEntity || problemType(t, big) != "/problems/refund-limit-exceeded" {
		t.Fatalf("over the limit: %d %s", big.Status, big.Body)
	}
	if n := rows(t, s, "idem_key = 'r-big'"); n != 0 {
		t.Fatalf("a rejected request wrote %d rows", n)
	}
	if r := s.Do(testenv.Request{Method: "GET", Path: "/problems/refund-limit-exceeded"}); r.Status != http.StatusOK {
		t.Fatalf("the rejection is not described: %d %s", r.Status, r.Body)
	}

	// After the records are purged, the row is the memory: the same
	// parameters replay the same bytes, others are refused, and so is the
	// key for another operation.
	if _, err := s.Pool.Exec(context.Background(), `DELETE FROM idempotency_record`); err != nil {
		t.Fatal(err)
	}
	replay := send(s, testenv.TenantA, "r-1", body)
	if replay.Status != http.StatusCreated || !bytes.Equal(replay.Body, first.Body) || replay.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay after purge: %d %v %s\nfirst: %s", replay.Status, replay.Header, replay.Body, first.Body)
	}
	if _, err := s.Pool.Exec(context.Background(), `DELETE FROM idempotency_record`); err != nil {
		t.Fatal(err)
	}
	changed = send(s, testenv.TenantA, "r-1", `{"payment_id":"pay-1","amount_cents":9900}`)
	if changed.Status != http.StatusUnprocessableEntity || problemType(t, changed) != "/problems/idempotency-key-reused" {
		t.Fatalf("changed parameters after purge: %d %s", changed.Status, changed.Body)
	}
	ticket := s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "r-1", Body: `{"customer_id":"c","title":"t"}`})
	if ticket.Status != http.StatusUnprocessableEntity || !bytes.Contains(ticket.Body, []byte("another operation (refund_request)")) {
		t.Fatalf("a ticket under the refund's key: %d %s", ticket.Status, ticket.Body)
	}
	if n := rows(t, s, "true"); n != 1 {
		t.Fatalf("%d rows in all", n)
	}

	// Another tenant's same key is its own intent.
	other := send(s, testenv.TenantB, "r-1", body)
	if other.Status != http.StatusCreated || other.Header.Get("Idempotent-Replayed") != "false" || bytes.Equal(other.Body, first.Body) {
		t.Fatalf("tenant B: %d %v %s", other.Status, other.Header, other.Body)
	}

	// The served contract has the operation, with its schema.
	doc := s.Do(testenv.Request{Method: "GET", Path: "/openapi.json"})
	if _, err := testenv.LoadContractFrom(doc.Body); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc.Body, []byte(`"`+path+`"`)) || !bytes.Contains(doc.Body, []byte(`"maxLength":64`)) {
		t.Fatalf("the contract lacks %s or its rules", path)
	}
}

// The operation is an MCP tool with the same schema and the same answers.
func TestTheDeclaredOperationIsAnMCPTool(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{Operations: []*op.Operation{Operation}})
	cs := testenv.MCPSession(t, mcpserver.New(mcpserver.Config{BaseURL: s.URL, Token: s.Tokens[testenv.TenantA], Operations: []*op.Operation{Operation}}))
	schema := testenv.ToolSchema(t, cs, "refund_request")
	for _, want := range []string{`"idempotency_key"`, `"maxLength":64`, `"minimum":1`} {
		if !bytes.Contains(schema, []byte(want)) {
			t.Errorf("the tool's schema lacks %s: %s", want, schema)
		}
	}
	call := func(args map[string]any) (*mcp.CallToolResult, testenv.ToolResult) {
		t.Helper()
		return testenv.CallTool(t, cs, "refund_request", args)
	}
	args := map[string]any{"idempotency_key": "m-1", "payment_id": "pay-7", "amount_cents": 100}
	res, first := call(args)
	if res.IsError || first.HTTPStatus != 201 || first.Replayed {
		t.Fatalf("first call: %+v %+v", res, first)
	}
	res, again := call(args)
	if res.IsError || !again.Replayed || again.Result["refund_request_id"] != first.Result["refund_request_id"] {
		t.Fatalf("retry: %+v %+v", res, again)
	}
	args["amount_cents"] = 200
	if res, _ := call(args); !res.IsError || !strings.Contains(fmt.Sprint(res.Content[0]), "CONFLICT") {
		t.Fatalf("changed arguments: %+v", res)
	}
	if n := rows(t, s, "idem_key = 'm-1'"); n != 1 {
		t.Fatalf("%d rows", n)
	}
}

// The program runs idemflow's roles with the operation: 'migrate' applies
// its migration beside idemflow's, a worker killed in the middle of the
// step leaves the intent to the next worker, which finishes it with one
// row, and 'audit' checks the operation's constraint.
func TestTheProgramRunsTheRolesAndSurvivesAWorkerKilledMidStep(t *testing.T) {
	dbURL := testenv.EmptyDatabase(t)
	env := []string{"DATABASE_URL=" + dbURL}
	migrate := testenv.StartChild(t, env, "schema at version", "migrate")
	if err := <-migrate.Done; err != nil {
		t.Fatalf("migrate: %v\n%s", err, migrate.Output())
	}
	// The stack's own database is the one the children use.
	s := testenv.NewStack(t, testenv.Options{Operations: []*op.Operation{Operation}, NoWorker: true})
	pool := s.Pool
	if n := testenv.Count(t, pool, "information_schema.tables", "table_name = 'refund_request'"); n != 1 {
		t.Fatal("the stack has no refund_request table")
	}
	if n := testenv.Count(t, testenv.PoolOn(t, dbURL, func(*pgxpool.Config) {}), "information_schema.tables", "table_name = 'refund_request'"); n != 1 {
		t.Fatalf("migrate did not apply the operation's migration:\n%s", migrate.Output())
	}
	env = []string{"DATABASE_URL=" + s.DatabaseURL, "TEMPORAL_ADDRESS=" + s.Server.GetFrontendHostPort(), "TEMPORAL_NAMESPACE=" + s.Server.GetDefaultNamespace()}
	worker := testenv.StartChild(t, env, "worker running", "worker")
	worker.WaitUp(t, time.Minute)

	// Hold the table, so that the step blocks inside its transaction.
	ctx := context.Background()
	lock, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx) //nolint:errcheck // released below
	if _, err := lock.Exec(ctx, `LOCK TABLE refund_request IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	req := testenv.Request{Path: path, Token: s.Tokens[testenv.TenantA], Key: "killed", Body: body, Header: map[string]string{"Prefer": "wait=0"}}
	if r := s.Do(req); r.Status != http.StatusAccepted {
		t.Fatalf("started: %d %s", r.Status, r.Body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for testenv.Count(t, pool, "pg_stat_activity", "wait_event_type = 'Lock' AND query LIKE '%refund_request%'") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the step never reached the table:\n%s", worker.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := worker.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-worker.Done
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	next := testenv.StartChild(t, env, "worker running", "worker")
	next.WaitUp(t, time.Minute)
	req.Header = map[string]string{"Prefer": "wait=5"}
	deadline = time.Now().Add(90 * time.Second)
	for {
		r := s.Do(req)
		if r.Status == http.StatusCreated {
			break
		}
		if r.Status != http.StatusAccepted && r.Status != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("after the kill: %d %s\n%s", r.Status, r.Body, next.Output())
		}
	}
	if n := rows(t, s, "idem_key = 'killed'"); n != 1 {
		t.Fatalf("%d rows after the kill", n)
	}

	// audit checks the operation's constraint: healthy, then not.
	audit := testenv.StartChild(t, env, "healthy", "audit")
	if err := <-audit.Done; err != nil {
		t.Fatalf("audit: %v\n%s", err, audit.Output())
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE refund_request DROP CONSTRAINT refund_request_tenant_key`); err != nil {
		t.Fatal(err)
	}
	audit = testenv.StartChild(t, env, "", "audit")
	err = <-audit.Done
	if code := exitCode(err); code != 3 || !strings.Contains(audit.Output(), "refund_request") {
		t.Fatalf("audit without the constraint: exit %d\n%s", code, audit.Output())
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// The team's code imports idemflow's public packages alone: the
// embedding API and the declarations (and the agent client, for a caller).
func TestTheTeamsCodeImportsOnlyPublicPackages(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	public := []string{"github.com/idemflow/idemflow", "github.com/idemflow/idemflow/op", "github.com/idemflow/idemflow/agentclient"}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if strings.HasPrefix(p, "github.com/idemflow/idemflow") && !slices.Contains(public, p) {
			t.Errorf("main.go imports %s, which is not one of idemflow's public packages %v", p, public)
		}
	}
}
