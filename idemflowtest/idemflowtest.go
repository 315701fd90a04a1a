// Package idemflowtest is the test kit for a team's own operations: Start
// brings up idemflow's real stack in the test's process with them (a fresh
// PostgreSQL database with idemflow's and the operations' migrations, the
// embedded Temporal server, the worker and the gateway; an MCP session on
// demand), and the Stack's methods are the checks every operation needs:
// a post under a key, its replay, a reused key's conflict, a concurrent
// storm of one intent, a worker killed in the middle of the step, and the
// audit. Nothing is mocked.
//
// PostgreSQL is the server at IDEMFLOW_TEST_DATABASE_URL (an admin URL on
// which the kit creates a database per stack), or 127.0.0.1:5432 as
// postgres; `idemflow postgres --data-dir DIR --port P` starts a private
// one. A test that kills a worker needs TestMain to call Main.
package idemflowtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemflow/idemflow"
	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/audit"
	"github.com/idemflow/idemflow/internal/mcpserver"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tenants every Stack has.
const (
	TenantA = testenv.TenantA
	TenantB = testenv.TenantB
)

// Main is TestMain for a package that tests its operations with the kit:
// it runs the tests, or, in a process a test started (KillWorkerMidStep),
// idemflow's command with ops, as the team's own program would.
func Main(m *testing.M, ops ...*op.Operation) {
	testenv.Main(m, func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		return idemflow.Run(ctx, args, stdout, stderr, ops...)
	})
}

// Options shape a Stack.
type Options struct {
	// Operations are the team's operations, served and run beside the
	// built-ins.
	Operations []*op.Operation
	// WorkerProcess runs no worker in the test's process: the stack's
	// intents wait for a worker process the test starts (StartWorker),
	// which it can kill (KillWorkerMidStep). It needs Main.
	WorkerProcess bool
}

// Stack is idemflow running for one test; it stops when the test ends.
type Stack struct {
	// URL is the gateway's base URL.
	URL string
	// DatabaseURL and Pool reach the stack's own database.
	DatabaseURL string
	Pool        *pgxpool.Pool

	t      testing.TB
	s      *testenv.Stack
	ops    []*op.Operation
	worker *testenv.Child
}

// Start starts a Stack serving and running ops, with its worker in the
// test's process.
func Start(t testing.TB, ops ...*op.Operation) *Stack {
	t.Helper()
	return StartWith(t, Options{Operations: ops})
}

// StartWith starts a Stack as opts say.
func StartWith(t testing.TB, opts Options) *Stack {
	t.Helper()
	s := testenv.NewStack(t, testenv.Options{Operations: opts.Operations, NoWorker: opts.WorkerProcess})
	return &Stack{URL: s.URL, DatabaseURL: s.DatabaseURL, Pool: s.Pool, t: t, s: s, ops: opts.Operations}
}

// Token is tenant's API token.
func (s *Stack) Token(tenant string) string { return s.s.Tokens[tenant] }

// Response is an answer of the gateway, read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Replayed reports whether the answer is a stored one, sent again.
func (r Response) Replayed() bool { return r.Header.Get("Idempotent-Replayed") == "true" }

// Problem is the slug of an error answer's problem type (the last part of
// its "type", as "idempotency-key-reused"), or "" for another answer.
func (r Response) Problem() string {
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") {
		return ""
	}
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(r.Body, &p) != nil {
		return ""
	}
	return p.Type[strings.LastIndex(p.Type, "/")+1:]
}

// Request is one call to the gateway.
type Request struct {
	Method string // POST when empty
	Path   string
	Tenant string // whose token it carries; none when empty
	Key    string // the Idempotency-Key; none when empty
	Body   string
	// Header holds more headers, as Prefer: wait=0.
	Header map[string]string
}

// Do sends req, checks the exchange against the OpenAPI document the stack
// serves (its operations included), and returns the answer.
func (s *Stack) Do(req Request) Response {
	s.t.Helper()
	tok := ""
	if req.Tenant != "" {
		tok = s.Token(req.Tenant)
	}
	r := s.s.Do(testenv.Request{Method: req.Method, Path: req.Path, Token: tok, Key: req.Key, Body: req.Body, Header: req.Header})
	return Response(r)
}

// Post sends body to path for tenant under key: Do, for the common case.
func (s *Stack) Post(tenant, path, key, body string) Response {
	s.t.Helper()
	return s.Do(Request{Path: path, Tenant: tenant, Key: key, Body: body})
}

// Replay sends first's request again and fails the test unless the answer
// is first's, byte for byte, marked replayed.
func (s *Stack) Replay(tenant, path, key, body string, first Response) Response {
	s.t.Helper()
	r := s.Post(tenant, path, key, body)
	if r.Status != first.Status || !bytes.Equal(r.Body, first.Body) || !r.Replayed() {
		s.t.Fatalf("the replay of %s under %q: %d %s (replayed %v), want the first answer %d %s, replayed",
			path, key, r.Status, r.Body, r.Replayed(), first.Status, first.Body)
	}
	return r
}

// Conflict sends other, a body with other parameters, under a key already
// used, and fails the test unless it is refused as a reused key (422
// idempotency-key-reused).
func (s *Stack) Conflict(tenant, path, key, other string) Response {
	s.t.Helper()
	r := s.Post(tenant, path, key, other)
	if r.Status != http.StatusUnprocessableEntity || r.Problem() != "idempotency-key-reused" {
		s.t.Fatalf("other parameters under the used key %q: %d %s, want 422 idempotency-key-reused", key, r.Status, r.Body)
	}
	return r
}

// Storm sends n copies of one intent at once, as retrying agents do, and
// fails the test unless every copy that was answered with the intent's
// result got the same one, and at most one of them is not a replay. A copy
// may also be told that the intent is still running (202, or 409
// request-in-progress), as a client that waits no longer is. It returns the
// answers.
func (s *Stack) Storm(tenant, path, key, body string, n int) []Response {
	s.t.Helper()
	out := make([]Response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := testenv.Send(s.URL, testenv.Request{Path: path, Token: s.Token(tenant), Key: key, Body: body})
			if err != nil {
				r.Status = -1
				r.Body = []byte(err.Error())
			}
			out[i] = Response(r)
		}()
	}
	wg.Wait()
	var first *Response
	fresh := 0
	for i, r := range out {
		switch {
		case r.Status == http.StatusAccepted || r.Problem() == "request-in-progress":
			continue
		case r.Status < 200 || r.Status >= 500:
			s.t.Fatalf("storm of %q, copy %d: %d %s", key, i, r.Status, r.Body)
		}
		if !r.Replayed() {
			fresh++
		}
		if first == nil {
			first = &out[i]
		} else if r.Status != first.Status || !bytes.Equal(r.Body, first.Body) {
			s.t.Fatalf("storm of %q: two answers, %d %s and %d %s", key, first.Status, first.Body, r.Status, r.Body)
		}
	}
	if fresh > 1 {
		s.t.Fatalf("storm of %q: %d answers not marked replayed, want at most 1", key, fresh)
	}
	return out
}

// Count is SELECT count(*) FROM table [WHERE where] in the stack's
// database.
func (s *Stack) Count(table, where string, args ...any) int {
	s.t.Helper()
	return testenv.Count(s.t, s.Pool, table, where, args...)
}

// Audit runs idemflow's audit on the stack's database and fails the test
// on any finding: a guarded table (the operations' included) without its
// UNIQUE (tenant_id, idem_key), a key with two rows, or a record
// PROCESSING past the reconcile horizon.
func (s *Stack) Audit() {
	s.t.Helper()
	rep, err := audit.Run(context.Background(), s.Pool, idem.NewStore(s.Pool, idem.Retention{}, nil), s.s.Set.Guards(), 5*time.Minute)
	if err != nil {
		s.t.Fatal(err)
	}
	if !rep.Healthy() {
		s.t.Fatalf("audit: missing constraints %v, duplicates %v, stale records %d", rep.MissingConstraint, rep.Duplicates, len(rep.Stale))
	}
}

// MCP is a session of an MCP client with the stack's MCP server.
type MCP struct {
	Session *mcp.ClientSession
	t       testing.TB
}

// MCP connects an MCP client to the stack's MCP server, as tenant; the
// session closes when the test ends.
func (s *Stack) MCP(tenant string) *MCP {
	s.t.Helper()
	return &MCP{Session: testenv.MCPSession(s.t, mcpserver.New(mcpserver.Config{BaseURL: s.URL, Token: s.Token(tenant), Operations: s.s.Set.Operations()})), t: s.t}
}

// Schema is the input schema of the tool, as JSON; a tool the server
// does not list fails the test.
func (m *MCP) Schema(tool string) []byte {
	m.t.Helper()
	return testenv.ToolSchema(m.t, m.Session, tool)
}

// ToolResult is the structured content of an idemflow tool's result.
type ToolResult struct {
	HTTPStatus int
	Replayed   bool
	Result     map[string]any
}

// Call calls the tool with args: its result, and the structured content.
func (m *MCP) Call(tool string, args map[string]any) (*mcp.CallToolResult, ToolResult) {
	m.t.Helper()
	res, out := testenv.CallTool(m.t, m.Session, tool, args)
	return res, ToolResult{HTTPStatus: out.HTTPStatus, Replayed: out.Replayed, Result: out.Result}
}

// env is what a worker process of the stack needs.
func (s *Stack) env() []string {
	return []string{"DATABASE_URL=" + s.DatabaseURL, "TEMPORAL_ADDRESS=" + s.s.Server.GetFrontendHostPort(),
		"TEMPORAL_NAMESPACE=" + s.s.Server.GetDefaultNamespace()}
}

// StartWorker starts a worker process on the stack (a stack started with
// Options.WorkerProcess), as the team's program runs one, and waits until
// it polls.
func (s *Stack) StartWorker() {
	s.t.Helper()
	s.worker = testenv.StartChild(s.t, s.env(), "worker running", "worker")
	s.worker.WaitUp(s.t, time.Minute)
}

// KillWorkerMidStep sends an intent of o under key, holds o's table so
// that the step blocks inside its transaction, SIGKILLs the worker process
// there, starts another, and fails the test unless the intent then ends
// with its answer and exactly one row in o's table. It returns that
// answer. The stack needs Options.WorkerProcess and a running worker.
func (s *Stack) KillWorkerMidStep(o *op.Operation, tenant, key, body string) Response {
	s.t.Helper()
	if s.worker == nil {
		s.t.Fatal("KillWorkerMidStep: no worker process (Options.WorkerProcess, then StartWorker)")
	}
	ctx := context.Background()
	lock, err := s.Pool.Begin(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	defer lock.Rollback(ctx) //nolint:errcheck // released below
	if _, err := lock.Exec(ctx, `LOCK TABLE `+o.Table+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		s.t.Fatal(err)
	}
	req := Request{Path: "/v1/" + o.Name, Tenant: tenant, Key: key, Body: body, Header: map[string]string{"Prefer": "wait=0"}}
	if r := s.Do(req); r.Status != http.StatusAccepted {
		s.t.Fatalf("started: %d %s", r.Status, r.Body)
	}
	for deadline := time.Now().Add(30 * time.Second); s.Count("pg_stat_activity", "wait_event_type = 'Lock' AND query LIKE $1", "%"+o.Table+"%") == 0; {
		if time.Now().After(deadline) {
			s.t.Fatalf("the step never reached %s:\n%s", o.Table, s.worker.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := s.worker.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatal(err)
	}
	if err := <-s.worker.Done; err == nil || !killed(err) {
		s.t.Fatalf("the worker ended otherwise than killed: %v", err)
	}
	if err := lock.Rollback(ctx); err != nil {
		s.t.Fatal(err)
	}
	s.StartWorker()
	req.Header = map[string]string{"Prefer": "wait=5"}
	var r Response
	for deadline := time.Now().Add(90 * time.Second); ; {
		if r = s.Do(req); r.Status != http.StatusAccepted && r.Problem() != "request-in-progress" {
			break
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("after the kill: %d %s\n%s", r.Status, r.Body, s.worker.Output())
		}
	}
	if n := s.Count(o.Table, "tenant_id = $1 AND idem_key = $2", tenant, key); n != 1 {
		s.t.Fatalf("after the kill: %d rows in %s under %q, want 1 (answer %d %s)", n, o.Table, key, r.Status, r.Body)
	}
	return r
}

// Command runs the team's program (the test binary, through Main) as the
// command args with env, and returns what it printed and its exit code
// (0 done, 1 failed, 2 usage; audit 3, inspect 4).
func Command(t testing.TB, env []string, args ...string) (output string, code int) {
	t.Helper()
	c := testenv.StartChild(t, env, "", args...)
	err := <-c.Done
	code = 0
	if err != nil {
		code = -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
	}
	return c.Output(), code
}

// Command is Command on the stack's database and Temporal server.
func (s *Stack) Command(args ...string) (output string, code int) {
	s.t.Helper()
	return Command(s.t, s.env(), args...)
}

// EmptyDatabase creates a database with no tables, dropped when the test
// ends, and returns its URL: for a test of the program's migrate.
func EmptyDatabase(t testing.TB) string {
	t.Helper()
	return testenv.EmptyDatabase(t)
}

// killed reports a process ended by SIGKILL.
func killed(err error) bool {
	ee, ok := err.(*exec.ExitError)
	if !ok {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// String names the stack in failures.
func (s *Stack) String() string { return fmt.Sprintf("idemflow test stack at %s", s.URL) }
