package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/idemflowtest"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
)

// TestMain lets the test binary run as this program, so that a test can
// kill its worker like a real one (idemflowtest.KillWorkerMidStep).
func TestMain(m *testing.M) { idemflowtest.Main(m, Operation) }

const path = "/v1/refund_request"

var body = `{"payment_id":"pay-1","amount_cents":2500,"reason":"damaged"}`

const tenantA, tenantB = idemflowtest.TenantA, idemflowtest.TenantB

// The team's operation, declared in main.go alone, gets what a built-in
// gets: a route in the served contract, a byte-identical replay, a 422 on
// changed parameters (also after a purge, and across operations), one row
// for a storm of one intent, a precise 400 from its schema with nothing
// written, its business rejection, and tenant isolation.
func TestTheDeclaredOperationIsExactlyOnceOverHTTP(t *testing.T) {
	s := idemflowtest.Start(t, Operation)
	first := s.Post(tenantA, path, "r-1", body)
	if first.Status != http.StatusCreated || first.Replayed() {
		t.Fatalf("first: %d %v %s", first.Status, first.Header, first.Body)
	}
	s.Replay(tenantA, path, "r-1", body, first)
	s.Conflict(tenantA, path, "r-1", `{"payment_id":"pay-1","amount_cents":9900}`)
	if n := s.Count("refund_request", "idem_key = 'r-1'"); n != 1 {
		t.Fatalf("%d rows for r-1", n)
	}
	s.Storm(tenantA, path, "r-storm", `{"payment_id":"pay-2","amount_cents":100}`, 8)
	if n := s.Count("refund_request", "idem_key = 'r-storm'"); n != 1 {
		t.Fatalf("a storm of one intent wrote %d rows", n)
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
		r := s.Post(tenantA, path, "bad-"+strings.ReplaceAll(name, " ", "-"), bad)
		if r.Status != http.StatusBadRequest || r.Problem() != "invalid-request" {
			t.Errorf("%s: %d %s", name, r.Status, r.Body)
		}
		if field := strings.Fields(name)[0]; !strings.Contains(name, " ") && name != "missing" && !bytes.Contains(r.Body, []byte(`"field":"`+field+`"`)) {
			t.Errorf("%s: the answer does not name the field: %s", name, r.Body)
		}
	}
	if n := s.Count("idempotency_record", "idem_key LIKE 'bad-%'"); n != 0 {
		t.Fatalf("bad input recorded %d intents", n)
	}

	// A business rejection rolls the step back and is the stored answer.
	big := s.Post(tenantA, path, "r-big", `{"payment_id":"pay-1","amount_cents":999000}`)
	if big.Status != http.StatusUnprocessableEntity || big.Problem() != "refund-limit-exceeded" {
		t.Fatalf("over the limit: %d %s", big.Status, big.Body)
	}
	if n := s.Count("refund_request", "idem_key = 'r-big'"); n != 0 {
		t.Fatalf("a rejected request wrote %d rows", n)
	}
	if r := s.Do(idemflowtest.Request{Method: "GET", Path: "/problems/refund-limit-exceeded"}); r.Status != http.StatusOK {
		t.Fatalf("the rejection is not described: %d %s", r.Status, r.Body)
	}

	// After the records are purged, the row is the memory: the same
	// parameters replay the same bytes, others are refused, and so is the
	// key for another operation.
	purge := func() {
		if _, err := s.Pool.Exec(context.Background(), `DELETE FROM idempotency_record`); err != nil {
			t.Fatal(err)
		}
	}
	purge()
	s.Replay(tenantA, path, "r-1", body, first)
	purge()
	s.Conflict(tenantA, path, "r-1", `{"payment_id":"pay-1","amount_cents":9900}`)
	ticket := s.Post(tenantA, "/v1/tickets", "r-1", `{"customer_id":"c","title":"t"}`)
	if ticket.Status != http.StatusUnprocessableEntity || !bytes.Contains(ticket.Body, []byte("another operation (refund_request)")) {
		t.Fatalf("a ticket under the refund's key: %d %s", ticket.Status, ticket.Body)
	}

	// Another tenant's same key is its own intent.
	other := s.Post(tenantB, path, "r-1", body)
	if other.Status != http.StatusCreated || other.Replayed() || bytes.Equal(other.Body, first.Body) {
		t.Fatalf("tenant B: %d %v %s", other.Status, other.Header, other.Body)
	}

	// The declaration's read serves what a key wrote, by its ID, to its
	// own tenant: the answer's bytes; another tenant and a malformed ID
	// get a 404.
	var created struct {
		ID string `json:"refund_request_id"`
	}
	if err := json.Unmarshal(first.Body, &created); err != nil || created.ID == "" {
		t.Fatalf("no refund_request_id in %s: %v", first.Body, err)
	}
	read := s.Do(idemflowtest.Request{Method: "GET", Path: path + "/" + created.ID, Tenant: tenantA})
	if read.Status != http.StatusOK || !bytes.Equal(read.Body, first.Body) {
		t.Fatalf("GET %s/%s: %d %s, want the first answer %s", path, created.ID, read.Status, read.Body, first.Body)
	}
	for _, r := range []idemflowtest.Request{
		{Method: "GET", Path: path + "/" + created.ID, Tenant: tenantB},
		{Method: "GET", Path: path + "/not-a-uuid", Tenant: tenantA},
	} {
		if got := s.Do(r); got.Status != http.StatusNotFound || got.Problem() != "not-found" {
			t.Errorf("GET %s as %s: %d %s, want 404 not-found", r.Path, r.Tenant, got.Status, got.Body)
		}
	}

	// The served contract has the operation, with its schema (every
	// exchange above was checked against it).
	doc := s.Do(idemflowtest.Request{Method: "GET", Path: "/openapi.json"})
	if !bytes.Contains(doc.Body, []byte(`"`+path+`"`)) || !bytes.Contains(doc.Body, []byte(`"maxLength":64`)) ||
		!bytes.Contains(doc.Body, []byte(`"`+path+`/{refund_request_id}"`)) || !bytes.Contains(doc.Body, []byte(`"#/components/schemas/RefundRequest"`)) {
		t.Fatalf("the contract lacks %s, its read, its answer's schema or its rules", path)
	}
	s.Audit()
}

// The operation is an MCP tool with the same schema and the same answers.
func TestTheDeclaredOperationIsAnMCPTool(t *testing.T) {
	s := idemflowtest.Start(t, Operation)
	m := s.MCP(tenantA)
	// The server's instructions name the tools it was given: the
	// built-ins' and the team's.
	if ins := m.Session.InitializeResult().Instructions; !strings.Contains(ins, "refund_request") || !strings.Contains(ins, "create_ticket") {
		t.Errorf("the instructions do not name the operations' tools: %q", ins)
	}
	schema := m.Schema("refund_request")
	for _, want := range []string{`"idempotency_key"`, `"maxLength":64`, `"minimum":1`} {
		if !bytes.Contains(schema, []byte(want)) {
			t.Errorf("the tool's schema lacks %s: %s", want, schema)
		}
	}
	args := map[string]any{"idempotency_key": "m-1", "payment_id": "pay-7", "amount_cents": 100}
	res, first := m.Call("refund_request", args)
	if res.IsError || first.HTTPStatus != 201 || first.Replayed {
		t.Fatalf("first call: %+v %+v", res, first)
	}
	res, again := m.Call("refund_request", args)
	if res.IsError || !again.Replayed || again.Result["refund_request_id"] != first.Result["refund_request_id"] {
		t.Fatalf("retry: %+v %+v", res, again)
	}
	args["amount_cents"] = 200
	if res, _ := m.Call("refund_request", args); !res.IsError || !strings.Contains(fmt.Sprint(res.Content[0]), "CONFLICT") {
		t.Fatalf("changed arguments: %+v", res)
	}
	if n := s.Count("refund_request", "idem_key = 'm-1'"); n != 1 {
		t.Fatalf("%d rows", n)
	}
}

// The program runs idemflow's roles with the operation: 'migrate' applies
// its migration beside idemflow's, a worker killed in the middle of the
// step leaves the intent to the next worker, which finishes it with one
// row, and 'audit' checks the operation's constraint.
func TestTheProgramRunsTheRolesAndSurvivesAWorkerKilledMidStep(t *testing.T) {
	dbURL := idemflowtest.EmptyDatabase(t)
	if out, code := idemflowtest.Command(t, []string{"DATABASE_URL=" + dbURL}, "migrate"); code != 0 || !strings.Contains(out, "schema at version") ||
		!strings.Contains(out, "operation refund_request: schema at version 1 (was 0)") {
		t.Fatalf("migrate: exit %d\n%s", code, out)
	}
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var tables int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM information_schema.tables WHERE table_name = 'refund_request'`).Scan(&tables); err != nil || tables != 1 {
		t.Fatalf("migrate did not apply the operation's migration (%v)", err)
	}

	s := idemflowtest.StartWith(t, idemflowtest.Options{Operations: []*op.Operation{Operation}, WorkerProcess: true})
	s.StartWorker()
	if r := s.KillWorkerMidStep(Operation, tenantA, "killed", body); r.Status != http.StatusCreated {
		t.Fatalf("after the kill: %d %s", r.Status, r.Body)
	}

	// audit checks the operation's constraint: healthy, then not.
	if out, code := s.Command("audit"); code != 0 || !strings.Contains(out, "healthy") {
		t.Fatalf("audit: exit %d\n%s", code, out)
	}
	if _, err := s.Pool.Exec(context.Background(), `ALTER TABLE refund_request DROP CONSTRAINT refund_request_tenant_key`); err != nil {
		t.Fatal(err)
	}
	if out, code := s.Command("audit"); code != 3 || !strings.Contains(out, "refund_request") {
		t.Fatalf("audit without the constraint: exit %d\n%s", code, out)
	}
}

// The team's code imports idemflow's public packages alone: the
// embedding API, the declarations and their intent rules (and the agent
// client, for a caller);
// its tests add the test kit.
func TestTheTeamsCodeImportsOnlyPublicPackages(t *testing.T) {
	public := []string{"github.com/idemflow/idemflow", "github.com/idemflow/idemflow/op", "github.com/idemflow/idemflow/intent", "github.com/idemflow/idemflow/agentclient",
		"github.com/idemflow/idemflow/idemflowtest"}
	for _, file := range []string{"main.go", "main_test.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, "github.com/idemflow/idemflow") && !slices.Contains(public, p) {
				t.Errorf("%s imports %s, which is not one of idemflow's public packages %v", file, p, public)
			}
		}
	}
}
