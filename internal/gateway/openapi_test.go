package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// The contract is a valid OpenAPI 3.1 document, served as it is embedded,
// and every side-effecting operation tells a model the key rule.
func TestOpenAPIIsAValid31DocumentServedAtOpenAPIJSON(t *testing.T) {
	doc, err := testenv.LoadContract()
	if err != nil {
		t.Fatal(err)
	}
	if !doc.IsOpenAPI31OrLater() || doc.IsOpenAPI32OrLater() {
		t.Fatalf("openapi %q, want 3.1", doc.OpenAPI)
	}
	// A cancel takes no key: it asks one run to stop, and asking again
	// changes nothing.
	keyless := map[string]bool{"/v1/operations/{id}/cancel": true}
	for path, item := range doc.Paths.Map() {
		if op := item.Post; op != nil && !keyless[path] {
			if !bytes.Contains([]byte(op.Description), []byte("SAME key")) || op.Parameters.GetByInAndName("header", "Idempotency-Key") == nil {
				t.Errorf("POST %s does not state the key rule or take the key", path)
			}
		}
	}
	s := testenv.NewStack(t, testenv.Options{})
	r := s.Do(testenv.Request{Method: "GET", Path: "/openapi.json"})
	if r.Status != http.StatusOK || !bytes.Equal(r.Body, s.Contract) {
		t.Fatalf("GET /openapi.json: %d", r.Status)
	}
}

// A wrong method is a 405 problem the document describes, with Allow.
func TestWrongMethodAnswerIsInTheContract(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	for _, path := range []string{"/v1/tickets", "/v1/operations/x"} {
		r := s.Do(testenv.Request{Method: "DELETE", Path: path, Token: s.Tokens[testenv.TenantA]})
		if r.Status != http.StatusMethodNotAllowed || r.Header.Get("Allow") == "" {
			t.Fatalf("DELETE %s: %d %v", path, r.Status, r.Header)
		}
	}
}

// Every link in the contract names an operation that exists, with its own
// parameters, from a value the answer has: a body field its schema
// declares, a header it documents, or the request's path parameter.
// Schemathesis's stateful run follows them, so a wrong one would send it
// astray, not fail.
func TestEveryLinkNamesAnOperationAndAValueTheAnswerHas(t *testing.T) {
	doc, err := testenv.LoadContract()
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]*openapi3.Operation{}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			ops[op.OperationID] = op
		}
	}
	n := 0
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for code, ref := range op.Responses.Map() {
				answer := ref.Value
				for name, l := range answer.Links {
					n++
					where := fmt.Sprintf("%s %s %s link %s", method, path, code, name)
					target := ops[l.Value.OperationID]
					if target == nil {
						t.Errorf("%s: no operation %q", where, l.Value.OperationID)
						continue
					}
					for param, expr := range l.Value.Parameters {
						if target.Parameters.GetByInAndName("path", param) == nil {
							t.Errorf("%s: %s has no path parameter %q", where, l.Value.OperationID, param)
						}
						e := fmt.Sprint(expr)
						switch {
						case strings.HasPrefix(e, "$response.body#/"):
							field := strings.TrimPrefix(e, "$response.body#/")
							schema := answer.Content.Get("application/json").Schema.Value
							if schema.Properties[field] == nil || !slices.Contains(schema.Required, field) {
								t.Errorf("%s: the answer's schema does not require %q", where, field)
							}
						case strings.HasPrefix(e, "$response.header."):
							if answer.Headers[strings.TrimPrefix(e, "$response.header.")] == nil {
								t.Errorf("%s: the answer does not document header %s", where, e)
							}
						case strings.HasPrefix(e, "$request.path."):
							if op.Parameters.GetByInAndName("path", strings.TrimPrefix(e, "$request.path.")) == nil {
								t.Errorf("%s: the request has no path parameter for %s", where, e)
							}
						default:
							t.Errorf("%s: expression %s is not one this test reads", where, e)
						}
					}
				}
			}
		}
	}
	if n < 20 {
		t.Fatalf("%d links, want the operation, ticket and order links", n)
	}
}

// The links lead where they say on the wire: a ticket's 201 to the ticket
// and to its operation (Operation-Id, the same on a replay), and an order's
// 201 to the order; idemflow's 202 names its operation in the header as in
// the body.
func TestTheLinksLeadWhereTheySay(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	tok := s.Tokens[testenv.TenantA]
	created := s.Do(testenv.Request{Method: "POST", Path: "/v1/tickets", Key: "link-1", Token: tok, Body: `{"customer_id":"c-1","title":"t"}`})
	var ticket struct {
		TicketID string `json:"ticket_id"`
	}
	if err := json.Unmarshal(created.Body, &ticket); err != nil || created.Status != 201 {
		t.Fatalf("%d %s", created.Status, created.Body)
	}
	opID := created.Header.Get("Operation-Id")
	if r := s.Do(testenv.Request{Method: "GET", Path: "/v1/tickets/" + ticket.TicketID, Token: tok}); r.Status != 200 {
		t.Fatalf("getTicket: %d %s", r.Status, r.Body)
	}
	r := s.Do(testenv.Request{Method: "GET", Path: "/v1/operations/" + opID, Token: tok})
	if r.Status != 200 || !strings.Contains(string(r.Body), `"result_status":201`) || !strings.Contains(string(r.Body), ticket.TicketID) {
		t.Fatalf("getOperation %q: %d %s", opID, r.Status, r.Body)
	}
	if again := s.Do(testenv.Request{Method: "POST", Path: "/v1/tickets", Key: "link-1", Token: tok, Body: `{"customer_id":"c-1","title":"t"}`}); again.Header.Get("Operation-Id") != opID {
		t.Fatalf("the replay's Operation-Id %q, want %q", again.Header.Get("Operation-Id"), opID)
	}
	order := s.Do(testenv.Request{Method: "POST", Path: "/v1/orders", Key: "link-2", Token: tok, Body: `{"customer_id":"c-1","items":[{"sku":"SKU-MOUSE","quantity":1}]}`})
	var o struct {
		OrderNo string `json:"order_no"`
	}
	if err := json.Unmarshal(order.Body, &o); err != nil || order.Status != 201 {
		t.Fatalf("%d %s", order.Status, order.Body)
	}
	if r := s.Do(testenv.Request{Method: "GET", Path: "/v1/orders/" + o.OrderNo, Token: tok}); r.Status != 200 {
		t.Fatalf("getOrder: %d %s", r.Status, r.Body)
	}

	pending := testenv.NewStack(t, testenv.Options{NoWorker: true})
	r = pending.Do(testenv.Request{Method: "POST", Path: "/v1/tickets", Key: "link-3", Token: pending.Tokens[testenv.TenantA],
		Body: `{"customer_id":"c-1","title":"t"}`, Header: map[string]string{"Prefer": "wait=0"}})
	var view struct {
		OperationID string `json:"operation_id"`
	}
	if err := json.Unmarshal(r.Body, &view); err != nil || r.Status != 202 || r.Header.Get("Operation-Id") != view.OperationID {
		t.Fatalf("202: Operation-Id %q, body %s", r.Header.Get("Operation-Id"), r.Body)
	}
}

// The contract refuses what the server refuses: every string of every
// request body excludes U+0000 (ijson refuses it: PostgreSQL cannot store
// it), by NoNULPattern or a pattern of its own (Schemathesis sent U+0000 in
// a reason, schema-valid, and got a 400).
func TestEveryRequestStringExcludesNUL(t *testing.T) {
	doc, err := testenv.LoadContract()
	if err != nil {
		t.Fatal(err)
	}
	strings := 0
	var walk func(where string, s *openapi3.Schema)
	walk = func(where string, s *openapi3.Schema) {
		if s == nil {
			return
		}
		if s.Type.Is("string") && s.Enum == nil {
			strings++
			re, err := regexp.Compile(s.Pattern)
			if s.Pattern == "" || err != nil || re.MatchString("a\x00b") {
				t.Errorf("%s: pattern %q lets U+0000 through", where, s.Pattern)
			}
		}
		for name, p := range s.Properties {
			walk(where+"."+name, p.Value)
		}
		if s.Items != nil {
			walk(where+"[]", s.Items.Value)
		}
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.RequestBody == nil {
				continue
			}
			for mt, c := range op.RequestBody.Value.Content {
				walk(fmt.Sprintf("%s %s %s", method, path, mt), c.Schema.Value)
			}
		}
	}
	if strings < 10 {
		t.Fatalf("%d request strings, want every built-in's", strings)
	}
}
