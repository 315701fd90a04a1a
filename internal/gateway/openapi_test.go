package gateway_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/idemflow/idemflow/internal/gateway"
	"github.com/idemflow/idemflow/internal/testenv"
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
	for path, item := range doc.Paths.Map() {
		if op := item.Post; op != nil {
			if !bytes.Contains([]byte(op.Description), []byte("SAME key")) || op.Parameters.GetByInAndName("header", "Idempotency-Key") == nil {
				t.Errorf("POST %s does not state the key rule or take the key", path)
			}
		}
	}
	s := testenv.NewStack(t, testenv.Options{})
	r := s.Do(testenv.Request{Method: "GET", Path: "/openapi.json"})
	if r.Status != http.StatusOK || !bytes.Equal(r.Body, gateway.OpenAPI()) {
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
