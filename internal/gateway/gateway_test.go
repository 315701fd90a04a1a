package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/gateway"
	"github.com/idemflow/idemflow/internal/ops/tickets"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
)

const ticketBody = `{"customer_id":"c-42","title":"Refund not received","description":"Order 991","priority":"high"}`

func ticket(s *testenv.Stack, tenantID, key, body string) testenv.Response {
	return s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[tenantID], Key: key, Body: body})
}

func countTickets(t *testing.T, s *testenv.Stack) int {
	return testenv.Count(t, s.Pool, "ticket", "")
}

func countRecords(t *testing.T, s *testenv.Stack) int {
	return testenv.Count(t, s.Pool, "idempotency_record", "")
}

func TestCreateTicketThenReplayByteForByte(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	first := ticket(s, testenv.TenantA, "k-1", ticketBody)
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	if got := first.Header.Get("Idempotent-Replayed"); got != "false" {
		t.Fatalf("first answer must not say replay, got %q", got)
	}
	var v map[string]any
	if err := json.Unmarshal(first.Body, &v); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ticket_id", "status", "customer_id", "title", "priority", "created_at", "idempotency_key", "workflow_id"} {
		if _, ok := v[f]; !ok {
			t.Errorf("body lacks %q: %s", f, first.Body)
		}
	}
	if first.Header.Get("Location") != "/v1/tickets/"+v["ticket_id"].(string) {
		t.Fatalf("Location %q", first.Header.Get("Location"))
	}
	// The same intent, with members reordered and the default spelled out
	// differently, is the same fingerprint.
	reordered := `{ "priority":"high","title":"Refund not received", "customer_id":"c-42","description":"Order 991" }`
	for i, body := range []string{ticketBody, reordered} {
		again := ticket(s, testenv.TenantA, "k-1", body)
		if again.Status != first.Status || !bytes.Equal(again.Body, first.Body) {
			t.Fatalf("retry %d: %d %s, want %d %s", i, again.Status, again.Body, first.Status, first.Body)
		}
		if again.Header.Get("Idempotent-Replayed") != "true" || again.Header.Get("Location") != first.Header.Get("Location") {
			t.Fatalf("retry %d headers: %v", i, again.Header)
		}
	}
	if n := countTickets(t, s); n != 1 {
		t.Fatalf("%d tickets, want 1", n)
	}
	got := s.Do(testenv.Request{Method: "GET", Path: first.Header.Get("Location"), Token: s.Tokens[testenv.TenantA]})
	if got.Status != 200 || !bytes.Equal(got.Body, first.Body) {
		t.Fatalf("GET ticket: %d %s", got.Status, got.Body)
	}
	ticket(s, testenv.TenantA, "k-1", `{"customer_id":"someone else","title":"x"}`)
	metrics := string(s.Do(testenv.Request{Method: "GET", Path: "/metrics"}).Body)
	for _, want := range []string{
		`idemflow_intents_total{biz_type="ticket.create",outcome="executed"} 1`,
		`idemflow_intents_total{biz_type="ticket.create",outcome="replayed"} 2`,
		`idemflow_intents_total{biz_type="ticket.create",outcome="key_reused"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestDefaultPriorityIsPartOfTheSameIntent(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	a := ticket(s, testenv.TenantA, "k-def", `{"customer_id":"c","title":"t"}`)
	b := ticket(s, testenv.TenantA, "k-def", `{"customer_id":"c","title":"t","priority":"normal","description":""}`)
	if a.Status != 201 || b.Status != 201 || !bytes.Equal(a.Body, b.Body) || b.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("omitted defaults must not change the intent: %d %s / %d %s", a.Status, a.Body, b.Status, b.Body)
	}
}

func TestFiftyConcurrentIdenticalRequestsMakeOneTicket(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	const n = 50
	var wg sync.WaitGroup
	resps := make([]testenv.Response, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resps[i] = ticket(s, testenv.TenantA, "storm", ticketBody)
		}()
	}
	wg.Wait()
	fresh := 0
	for i, r := range resps {
		if r.Status != http.StatusCreated {
			t.Fatalf("response %d: %d %s", i, r.Status, r.Body)
		}
		if !bytes.Equal(r.Body, resps[0].Body) {
			t.Fatalf("response %d differs:\n%s\n%s", i, r.Body, resps[0].Body)
		}
		if r.Header.Get("Idempotent-Replayed") == "false" {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d answers claim to be the first, want exactly 1", fresh)
	}
	if c := countTickets(t, s); c != 1 {
		t.Fatalf("%d tickets, want 1", c)
	}
}

func TestChangedBodyUnderSameKeyIs422AndNotExecuted(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	if r := ticket(s, testenv.TenantA, "k-2", ticketBody); r.Status != 201 {
		t.Fatalf("first: %d %s", r.Status, r.Body)
	}
	changed := strings.Replace(ticketBody, `"high"`, `"urgent"`, 1)
	r := ticket(s, testenv.TenantA, "k-2", changed)
	if r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("changed body: %d %s", r.Status, r.Body)
	}
	assertProblem(t, r, "/problems/idempotency-key-reused")
	if c := countTickets(t, s); c != 1 {
		t.Fatalf("%d tickets, want 1", c)
	}
}

func assertProblem(t *testing.T, r testenv.Response, typ string) {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json; body %s", ct, r.Body)
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("problem body: %v: %s", err, r.Body)
	}
	if p.Type != typ || p.Status != r.Status || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem %+v, want type %s status %d", p, typ, r.Status)
	}
}

func TestBadInputIsRejectedAndWritesNothing(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	tok := s.Tokens[testenv.TenantA]
	big := `{"customer_id":"c","title":"t","description":"` + strings.Repeat("x", 1<<20) + `"}`
	cases := []struct {
		name   string
		req    testenv.Request
		status int
		typ    string
	}{
		{"no token", testenv.Request{Path: "/v1/tickets", Key: "k", Body: ticketBody}, 401, "/problems/unauthorized"},
		{"unknown token", testenv.Request{Path: "/v1/tickets", Token: "idf_nope_nope_nope_nope", Key: "k", Body: ticketBody}, 401, "/problems/unauthorized"},
		{"no key", testenv.Request{Path: "/v1/tickets", Token: tok, Body: ticketBody}, 400, "/problems/invalid-idempotency-key"},
		{"key with comma", testenv.Request{Path: "/v1/tickets", Token: tok, Key: "a,b", Body: ticketBody}, 400, "/problems/invalid-idempotency-key"},
		{"key too long", testenv.Request{Path: "/v1/tickets", Token: tok, Key: strings.Repeat("k", 256), Body: ticketBody}, 400, "/problems/invalid-idempotency-key"},
		{"malformed json", testenv.Request{Path: "/v1/tickets", Token: tok, Key: "k", Body: `{"customer_id":`}, 400, "/problems/invalid-request"},
		{"not an object", testenv.Request{Path: "/v1/tickets", Token: tok, Key: "k", Body: `[1]`}, 400, "/problems/invalid-request"},
		{"trailing data", testenv.Request{Path: "/v1/tickets", Token: tok, Key: "k", Body: ticketBody + `{}`}, 400, "/problems/invalid-request"},
		{"unknown field", testenv.Request{Path: "/v1/tickets", Token: tok, Key: "k", Body: `{"customer_id":"c","title":"t","assignee":"bob"}`}, 400, "/problems/invalid-request"},
		{"wrong type", testenv.Request{Path: "/v1/tickets", Token: tok, Key: "k", Body: `{"customer_id":7,"title":"t"}`}, 400, "/problems/invalid-request"},
		{"bad priority", testenv.Request{Path: "/v1/tickets", Token: tok, Key: "k", Body: `{"customer_id":"c","title":"t","priority":"asap"}`}, 400, "/problems/invalid-request"},
		{"empty title", testenv.Request{Path: "/v1/tickets", Token: tok, Key: "k", Body: `{"customer_id":"c","title":""}`}, 400, "/problems/invalid-request"},
		{"title too long", testenv.Request{Path: "/v1/tickets", Token: tok, Key: "k", Body: `{"customer_id":"c","title":"` + strings.Repeat("t", 201) + `"}`}, 400, "/problems/invalid-request"},
		{"empty body", testenv.Request{Path: "/v1/tickets", Token: tok, Key: "k"}, 400, "/problems/invalid-request"},
		{"NUL in a field", testenv.Request{Path: "/v1/tickets", Token: tok, Key: "k", Body: `{"customer_id":"c\u0000","title":"t"}`}, 400, "/problems/invalid-request"},
		{"NUL in an order", testenv.Request{Path: "/v1/orders", Token: tok, Key: "k", Body: `{"customer_id":"c","items":[{"sku":"SKU-MOUSE","quantity":1}],"coupon_code":"A\u0000"}`}, 400, "/problems/invalid-request"},
		{"duplicate field", testenv.Request{Path: "/v1/tickets", Token: tok, Key: "k", Body: `{"customer_id":"c","title":"t","title":"u"}`}, 400, "/problems/invalid-request"},
		{"field in another case", testenv.Request{Path: "/v1/tickets", Token: tok, Key: "k", Body: `{"customer_id":"c","TITLE":"t"}`}, 400, "/problems/invalid-request"},
		{"body over 1 MiB", testenv.Request{Path: "/v1/tickets", Token: tok, Key: "k", Body: big}, 413, "/problems/body-too-large"},
		{"text body", testenv.Request{Path: "/v1/tickets", Token: tok, Key: "k", Body: ticketBody, Header: map[string]string{"Content-Type": "text/plain"}}, 415, "/problems/unsupported-media-type"},
		{"curl's form type", testenv.Request{Path: "/v1/tickets", Token: tok, Key: "k", Body: ticketBody, Header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}, 415, "/problems/unsupported-media-type"},
		{"form type on an order", testenv.Request{Path: "/v1/orders", Token: tok, Key: "k", Body: `{"customer_id":"c","items":[{"sku":"SKU-MOUSE","quantity":1}]}`, Header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}, 415, "/problems/unsupported-media-type"},
		{"unparsable type", testenv.Request{Path: "/v1/tickets", Token: tok, Key: "k", Body: ticketBody, Header: map[string]string{"Content-Type": "json;;"}}, 415, "/problems/unsupported-media-type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := s.Do(c.req)
			if r.Status != c.status {
				t.Fatalf("status %d, want %d: %s", r.Status, c.status, r.Body)
			}
			assertProblem(t, r, c.typ)
		})
	}
	if n, m := countRecords(t, s), countTickets(t, s); n != 0 || m != 0 {
		t.Fatalf("bad input wrote %d records and %d tickets", n, m)
	}
	// Nothing was recorded, so the same key works once the body is fixed.
	if r := ticket(s, testenv.TenantA, "k", ticketBody); r.Status != 201 {
		t.Fatalf("corrected retry: %d %s", r.Status, r.Body)
	}
	// A transition of an order that exists is held to the same type.
	o := orderNo(t, order(s, testenv.TenantA, "o-media", basket))
	r := s.Do(testenv.Request{Path: "/v1/orders/" + o + "/pay", Token: tok, Key: "pay-media", Body: `{"payment_ref":"p"}`, Header: map[string]string{"Content-Type": "text/plain"}})
	assertProblem(t, r, "/problems/unsupported-media-type")
	// A transition may come without a body, but a body of blanks is
	// present and is not JSON (RFC 8259 has no empty text): Schemathesis
	// sent " " to a cancel and saw it accepted.
	for _, blank := range []string{" ", "\n", "\t\r\n"} {
		r = s.Do(testenv.Request{Path: "/v1/orders/" + o + "/cancel", Token: tok, Key: "cancel-blank", Body: blank})
		if r.Status != 400 {
			t.Fatalf("a cancel with the body %q: %d, want 400: %s", blank, r.Status, r.Body)
		}
		assertProblem(t, r, "/problems/invalid-request")
	}
	if r = s.Do(testenv.Request{Path: "/v1/orders/" + o, Token: tok, Method: "GET"}); !strings.Contains(string(r.Body), `"status":"CREATED"`) {
		t.Fatalf("after blank cancels the order is %s, want it CREATED", r.Body)
	}
	if r = transition(s, testenv.TenantA, o, "cancel", "cancel-blank", ``); r.Status != 200 {
		t.Fatalf("the same key's cancel with no body: %d %s", r.Status, r.Body)
	}
	// A body without Content-Type is read as JSON, as the README says; one
	// with a charset parameter is JSON too.
	for key, ct := range map[string]string{"no-type": "", "charset": "application/json; charset=utf-8"} {
		r := s.Do(testenv.Request{Path: "/v1/tickets", Token: tok, Key: key, Body: ticketBody, Header: map[string]string{"Content-Type": ct}})
		if r.Status != 201 {
			t.Fatalf("Content-Type %q: %d %s", ct, r.Status, r.Body)
		}
	}
}

func TestProblemTypesAreDescribedAndUnknownOnesAreNotFound(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	for _, slug := range []string{"idempotency-key-reused", "out-of-stock", "unsupported-media-type"} {
		r := s.Do(testenv.Request{Method: "GET", Path: "/problems/" + slug})
		if r.Status != 200 || !strings.Contains(string(r.Body), "/problems/"+slug) {
			t.Fatalf("/problems/%s: %d %s", slug, r.Status, r.Body)
		}
	}
	r := s.Do(testenv.Request{Method: "GET", Path: "/problems/idempotency-key-reuse"})
	if r.Status != 404 {
		t.Fatalf("a misspelt problem type answered %d, want 404: %s", r.Status, r.Body)
	}
	assertProblem(t, r, "/problems/not-found")
}

func TestWrongTypeErrorNamesTheField(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	r := ticket(s, testenv.TenantA, "k", `{"customer_id":"c","title":"t","priority":3}`)
	var p struct {
		Errors []struct{ Field, Reason string } `json:"errors"`
	}
	_ = json.Unmarshal(r.Body, &p)
	if r.Status != 400 || len(p.Errors) != 1 || p.Errors[0].Field != "priority" || !strings.Contains(p.Errors[0].Reason, "string") {
		t.Fatalf("want a priority type error, got %d %s", r.Status, r.Body)
	}
}

// Whichever credential a caller uses, idemflow's API token or an OAuth
// access token of its tenant's, tenants are apart.
func TestTenantsAreIsolated(t *testing.T) {
	t.Run("API tokens", func(t *testing.T) { tenantsAreIsolated(t, testenv.NewStack(t, testenv.Options{})) })
	t.Run("OAuth access tokens", func(t *testing.T) {
		o := newOAuthStack(t)
		o.Tokens = map[string]string{testenv.TenantA: o.token(o.svcA), testenv.TenantB: o.token(o.svcB)}
		tenantsAreIsolated(t, o.Stack)
	})
}

func tenantsAreIsolated(t *testing.T, s *testenv.Stack) {
	a := ticket(s, testenv.TenantA, "shared-key", ticketBody)
	b := ticket(s, testenv.TenantB, "shared-key", ticketBody)
	if a.Status != 201 || b.Status != 201 {
		t.Fatalf("%d %s / %d %s", a.Status, a.Body, b.Status, b.Body)
	}
	if b.Header.Get("Idempotent-Replayed") != "false" || bytes.Equal(a.Body, b.Body) {
		t.Fatal("tenant B got tenant A's result")
	}
	if n := countTickets(t, s); n != 2 {
		t.Fatalf("%d tickets, want 2", n)
	}
	// B cannot read A's ticket, nor its operation.
	r := s.Do(testenv.Request{Method: "GET", Path: a.Header.Get("Location"), Token: s.Tokens[testenv.TenantB]})
	if r.Status != 404 {
		t.Fatalf("cross-tenant GET: %d %s", r.Status, r.Body)
	}
	assertProblem(t, r, "/problems/not-found")
	rec, err := s.Records.Get(context.Background(), testenv.TenantA, "shared-key")
	if err != nil {
		t.Fatal(err)
	}
	r = s.Do(testenv.Request{Method: "GET", Path: "/v1/operations/" + rec.ID.String(), Token: s.Tokens[testenv.TenantB]})
	if r.Status != 404 {
		t.Fatalf("cross-tenant operation: %d %s", r.Status, r.Body)
	}
	r = s.Do(testenv.Request{Method: "GET", Path: "/v1/operations/" + rec.ID.String(), Token: s.Tokens[testenv.TenantA]})
	if r.Status != 200 || !strings.Contains(string(r.Body), `"status":"succeeded"`) {
		t.Fatalf("own operation: %d %s", r.Status, r.Body)
	}
}

func TestSlowIntentAnswers202ThenDuplicate409ThenCompletes(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{NoWorker: true})
	wait0 := map[string]string{"Prefer": "wait=0"}
	first := s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "slow", Body: ticketBody, Header: wait0})
	if first.Status != http.StatusAccepted || !strings.HasPrefix(first.Header.Get("Location"), "/v1/operations/") {
		t.Fatalf("owner while running: %d %v %s", first.Status, first.Header, first.Body)
	}
	if first.Header.Get("Preference-Applied") != "wait=0" {
		t.Fatalf("Preference-Applied %q", first.Header.Get("Preference-Applied"))
	}
	dup := s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "slow", Body: ticketBody, Header: map[string]string{"Prefer": "wait=1"}})
	if dup.Status != http.StatusConflict || dup.Header.Get("Retry-After") == "" {
		t.Fatalf("duplicate while running: %d %v %s", dup.Status, dup.Header, dup.Body)
	}
	assertProblem(t, dup, "/problems/request-in-progress")
	op := s.Do(testenv.Request{Method: "GET", Path: first.Header.Get("Location"), Token: s.Tokens[testenv.TenantA]})
	if op.Status != 200 || !strings.Contains(string(op.Body), `"status":"processing"`) {
		t.Fatalf("operation while running: %d %s", op.Status, op.Body)
	}

	s.StartWorker()
	done := ticket(s, testenv.TenantA, "slow", ticketBody) // waits up to 5 s
	if done.Status != 201 || done.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after the worker ran: %d %s", done.Status, done.Body)
	}
	op = s.Do(testenv.Request{Method: "GET", Path: first.Header.Get("Location"), Token: s.Tokens[testenv.TenantA]})
	if !strings.Contains(string(op.Body), `"status":"succeeded"`) || !strings.Contains(string(op.Body), `"result_status":201`) {
		t.Fatalf("operation after completion: %s", op.Body)
	}
	if n := countTickets(t, s); n != 1 {
		t.Fatalf("%d tickets", n)
	}
}

// A gateway that dies after recording the intent and before starting its
// workflow is simulated by one whose Temporal is unreachable: the record
// is written, the start fails. A retry through a healthy gateway must run
// the intent exactly once.
func TestGatewayDeathBetweenRecordAndStartLosesNothing(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	dead, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	broken := httptest.NewServer(gateway.New(s.Pool, dead, s.Records, s.Set, s.Logger).Handler())
	defer broken.Close()
	req := testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "crash", Body: ticketBody}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = ctx
	r := testenv.Do(t, broken.URL, req)
	if r.Status != http.StatusServiceUnavailable {
		t.Fatalf("with Temporal down: %d %s", r.Status, r.Body)
	}
	assertProblem(t, r, "/problems/service-unavailable")
	rec, err := s.Records.Get(context.Background(), testenv.TenantA, "crash")
	if err != nil || rec.Status != idem.StatusProcessing {
		t.Fatalf("record after the failed start: %+v %v", rec, err)
	}
	if n := countTickets(t, s); n != 0 {
		t.Fatalf("%d tickets before the retry", n)
	}
	for range 3 {
		r = s.Do(req)
		if r.Status != 201 {
			t.Fatalf("retry: %d %s", r.Status, r.Body)
		}
	}
	if n := countTickets(t, s); n != 1 {
		t.Fatalf("%d tickets, want 1", n)
	}
}

func TestDatabaseDownIs503(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	gw := httptest.NewServer(gateway.New(pool, s.Temporal, idem.NewStore(pool, idem.Retention{}, s.Set.Recall), s.Set, s.Logger).Handler())
	defer gw.Close()
	r := testenv.Do(t, gw.URL, testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "k", Body: ticketBody})
	if r.Status != http.StatusServiceUnavailable {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	assertProblem(t, r, "/problems/service-unavailable")
	// With the token store up and the record store down, the request gets
	// past authentication to Claim, which must fail closed: no workflow,
	// no ticket.
	half := httptest.NewServer(gateway.New(s.Pool, s.Temporal, idem.NewStore(pool, idem.Retention{}, s.Set.Recall), s.Set, s.Logger).Handler())
	defer half.Close()
	r = testenv.Do(t, half.URL, testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "k-claim", Body: ticketBody})
	if r.Status != http.StatusServiceUnavailable {
		t.Fatalf("records down: %d %s", r.Status, r.Body)
	}
	assertProblem(t, r, "/problems/service-unavailable")
	if _, err := s.Temporal.DescribeWorkflowExecution(context.Background(), tickets.WorkflowID(testenv.TenantA, "k-claim"), ""); err == nil {
		t.Fatal("a workflow started without its record")
	}
	if n := countTickets(t, s); n != 0 {
		t.Fatalf("%d tickets written without a record", n)
	}
	// Liveness calls no dependency; readiness calls both.
	if h := testenv.Do(t, gw.URL, testenv.Request{Method: "GET", Path: "/readyz"}); h.Status != 503 {
		t.Fatalf("readyz with the database down: %d", h.Status)
	}
	if h := testenv.Do(t, gw.URL, testenv.Request{Method: "GET", Path: "/healthz"}); h.Status != 200 {
		t.Fatalf("healthz with the database down: %d", h.Status)
	}
	if h := s.Do(testenv.Request{Method: "GET", Path: "/readyz"}); h.Status != 200 {
		t.Fatalf("readyz: %d %s", h.Status, h.Body)
	}
}

func TestWrongMethodIs405Problem(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{NoWorker: true})
	r := s.Do(testenv.Request{Method: "GET", Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA]})
	if r.Status != http.StatusMethodNotAllowed || r.Header.Get("Allow") != "POST" {
		t.Fatalf("%d Allow=%q %s", r.Status, r.Header.Get("Allow"), r.Body)
	}
	assertProblem(t, r, "/problems/method-not-allowed")
	r = s.Do(testenv.Request{Method: "DELETE", Path: "/v1/orders/ORD-1", Token: s.Tokens[testenv.TenantA]})
	if r.Status != http.StatusMethodNotAllowed || r.Header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("%d Allow=%q %s", r.Status, r.Header.Get("Allow"), r.Body)
	}
	r = s.Do(testenv.Request{Method: "GET", Path: "/v2/nothing"})
	assertProblem(t, r, "/problems/not-found")
}

// One 400 names every field that breaks a rule, unknown members included,
// not only the first the decoder met.
// orderFaults is a cancel's body with two faults.
const orderFaults = `{"reason":"r\u0000","foo":1}`

func TestEveryBrokenRuleIsNamedInOneAnswer(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	for i, c := range []struct {
		body  string
		names []string
	}{
		{`{"customer_id":"c","title":"","assignee":"bob","due":"friday","priority":"asap"}`, []string{"assignee", "due", "title", "priority"}},
		// A value of the wrong type stopped the decoder at that field:
		// the fields after it, and a missing one, went unnamed.
		{`{"customer_id":5,"priority":"asap","foo":1}`, []string{"customer_id", "priority", "foo", "title"}},
		{`{"title":7}`, []string{"title", "customer_id"}},
		{`{"customer_id":"c","title":"t","priority":7,"bar":true}`, []string{"priority", "bar"}},
		// Text PostgreSQL cannot store and numbers no JSON reader holds
		// exactly stopped the decoder before the schema was asked
		// (Schemathesis's idemflow_every_field_named found them).
		{`{"customer_id":"c\u0000","title":"t","bar":1}`, []string{"customer_id", "bar"}},
		{`{"customer_id":"c","title":"t\u0000"}`, []string{"title"}},
		{`{"customer_id":"c\u0000","title":"t\u0000","priority":"asap"}`, []string{"customer_id", "title", "priority"}},
		{`{"customer_id":1e400,"priority":"asap"}`, []string{"customer_id", "priority", "title"}},
		{`{"customer_id":"c","title":"t","bar":9007199254740993}`, []string{"bar"}},
		// Broken JSON after a fault the decoder stopped at is the body's
		// one fault, not a field's.
		{`{"foo":1,"title":}`, []string{"body"}},
		// A member named "" was named "body", as if the body were at fault.
		{`{"customer_id":"c","title":"t","":null}`, []string{`""`}},
		// An operation with a path parameter (an order's cancel) decoded
		// the body once more first, and stopped at a U+0000.
		{orderFaults, []string{"reason", "foo"}},
		{`{"title":5,"customer_id":"c"`, []string{"body"}},
	} {
		path := "/v1/tickets"
		if c.body == orderFaults {
			path = "/v1/orders/ORD-none/cancel"
		}
		r := s.Do(testenv.Request{Path: path, Token: s.Tokens[testenv.TenantA], Key: fmt.Sprintf("k-%d", i), Body: c.body})
		if i == 1 {
			if vector := severalFaults(t); string(r.Body) != vector {
				t.Errorf("the clients' vector of a body with several faults (clients/testdata/answers.json) is not the server's answer:\n%s\nwant\n%s", vector, r.Body)
			}
		}
		var p struct {
			Errors []struct{ Field, Reason string } `json:"errors"`
		}
		_ = json.Unmarshal(r.Body, &p)
		named := map[string]bool{}
		for _, e := range p.Errors {
			named[e.Field] = true
		}
		for _, f := range c.names {
			if r.Status != 400 || !named[f] {
				t.Errorf("%s: the 400 does not name %s: %d %s", c.body, f, r.Status, r.Body)
			}
		}
	}
	if n := countRecords(t, s); n != 0 {
		t.Fatalf("%d records", n)
	}
}

// severalFaults is the body of the clients' shared vector of a refusal
// that names several fields, which every client reads the same way.
func severalFaults(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("../../clients/testdata/answers.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Answers []struct{ Name, Body string }
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	for _, a := range v.Answers {
		if a.Name == "idemflow refuses a body with several faults" {
			return a.Body
		}
	}
	t.Fatal("clients/testdata/answers.json has no vector of a body with several faults")
	return ""
}

// An intent completes on a database whose settings the one-statement open
// does not like (pgconn's EscapeString needs standard-conforming strings
// and a UTF8 client encoding): idemflow pins them on its connections, so
// no setting leaves an intent PROCESSING.
func TestAnIntentCompletesWhateverTheDatabasesStringSettings(t *testing.T) {
	for name, setup := range map[string]testenv.Setup{
		"standard_conforming_strings off": {Settings: []string{"standard_conforming_strings = off"}},
		"SQL_ASCII":                       {Create: "ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"},
	} {
		t.Run(name, func(t *testing.T) {
			s := testenv.NewStack(t, testenv.Options{Database: setup})
			body := `{"customer_id":"c-ü","title":"Drucker brennt: 'sofort' \\ bitte","priority":"high"}`
			first := ticket(s, testenv.TenantA, `k-'q\`, body)
			again := ticket(s, testenv.TenantA, `k-'q\`, body)
			if first.Status != 201 || again.Status != 201 || !bytes.Equal(first.Body, again.Body) || !bytes.Contains(first.Body, []byte("Drucker brennt: 'sofort'")) {
				t.Fatalf("first %d %s, again %d %s", first.Status, first.Body, again.Status, again.Body)
			}
			if n := countTickets(t, s); n != 1 {
				t.Fatalf("%d tickets", n)
			}
		})
	}
}
