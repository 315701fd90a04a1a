package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// Every tool's input schema accepts and refuses what the gateway does: a
// model learns a rule (priority's values, a title's length, the key's
// characters) from the schema it is given, not from a 400 after the call.
// Each case is checked against the schema the server lists and sent over
// HTTP; the gateway refuses it with 400 exactly when the schema does.
func TestMCPInputSchemasAgreeWithTheHTTPContract(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	cs := inMemory(t, s)
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]*jsonschema.Resolved{}
	for _, tool := range tools.Tools {
		raw, _ := json.Marshal(tool.InputSchema)
		var sc jsonschema.Schema
		if err := json.Unmarshal(raw, &sc); err != nil {
			t.Fatal(err)
		}
		if schemas[tool.Name], err = sc.Resolve(nil); err != nil {
			t.Fatalf("%s: %v", tool.Name, err)
		}
	}
	// An order that exists: the gateway looks an order up before it reads
	// the body, and a valid transition here only moves it.
	created := s.Do(testenv.Request{Path: "/v1/orders", Token: s.Tokens[testenv.TenantA], Key: "schema-order",
		Body: `{"customer_id":"c","items":[{"sku":"SKU-MOUSE","quantity":1}]}`})
	var order struct {
		OrderNo string `json:"order_no"`
	}
	if err := json.Unmarshal(created.Body, &order); err != nil || order.OrderNo == "" {
		t.Fatalf("order: %d %s", created.Status, created.Body)
	}
	long := func(n int) string { return strings.Repeat("x", n) }
	item := map[string]any{"sku": "SKU-MOUSE", "quantity": 1}
	cases := []struct {
		tool, name string
		args       map[string]any
	}{
		{"create_ticket", "valid", map[string]any{"customer_id": "c", "title": "t"}},
		{"create_ticket", "every field", map[string]any{"customer_id": "c", "title": long(200), "description": long(10000), "priority": "urgent"}},
		{"create_ticket", "priority High", map[string]any{"customer_id": "c", "title": "t", "priority": "High"}},
		{"create_ticket", "title too long", map[string]any{"customer_id": "c", "title": long(201)}},
		{"create_ticket", "empty title", map[string]any{"customer_id": "c", "title": ""}},
		{"create_ticket", "no customer", map[string]any{"title": "t"}},
		{"create_ticket", "unknown field", map[string]any{"customer_id": "c", "title": "t", "assignee": "bob"}},
		{"create_ticket", "description too long", map[string]any{"customer_id": "c", "title": "t", "description": long(10001)}},
		{"create_ticket", "key with a comma", map[string]any{"idempotency_key": "a,b", "customer_id": "c", "title": "t"}},
		{"create_ticket", "key with a space", map[string]any{"idempotency_key": "a b", "customer_id": "c", "title": "t"}},
		{"create_ticket", "key of 255", map[string]any{"idempotency_key": long(255), "customer_id": "c", "title": "t"}},
		{"create_ticket", "key of 256", map[string]any{"idempotency_key": long(256), "customer_id": "c", "title": "t"}},
		{"create_order", "valid", map[string]any{"customer_id": "c", "items": []any{item}}},
		{"create_order", "items null", map[string]any{"customer_id": "c", "items": nil}},
		{"create_order", "no items", map[string]any{"customer_id": "c", "items": []any{}}},
		{"create_order", "quantity 0", map[string]any{"customer_id": "c", "items": []any{map[string]any{"sku": "SKU-MOUSE", "quantity": 0}}}},
		{"create_order", "bad sku", map[string]any{"customer_id": "c", "items": []any{map[string]any{"sku": "no sku", "quantity": 1}}}},
		{"create_order", "bad coupon", map[string]any{"customer_id": "c", "items": []any{item}, "coupon_code": "A B"}},
		{"pay_order", "valid", map[string]any{"order_no": order.OrderNo, "payment_ref": "psp-1"}},
		{"pay_order", "no payment_ref", map[string]any{"order_no": order.OrderNo}},
		{"pay_order", "payment_ref too long", map[string]any{"order_no": order.OrderNo, "payment_ref": long(129)}},
		{"cancel_order", "valid", map[string]any{"order_no": order.OrderNo, "reason": "r"}},
		{"cancel_order", "reason too long", map[string]any{"order_no": order.OrderNo, "reason": long(501)}},
		{"refund_order", "payment_ref refused", map[string]any{"order_no": order.OrderNo, "payment_ref": "psp-1"}},
		{"fulfill_order", "valid", map[string]any{"order_no": order.OrderNo}},
	}
	for i, c := range cases {
		t.Run(c.tool+"/"+c.name, func(t *testing.T) {
			args := map[string]any{"idempotency_key": fmt.Sprintf("schema-%d", i)}
			for k, v := range c.args {
				args[k] = v
			}
			mcpRefuses := schemas[c.tool].Validate(args) != nil
			key, _ := args["idempotency_key"].(string)
			body := map[string]any{}
			path := "/v1/tickets"
			for k, v := range args {
				if k != "idempotency_key" && k != "order_no" {
					body[k] = v
				}
			}
			switch {
			case c.tool == "create_order":
				path = "/v1/orders"
			case strings.HasSuffix(c.tool, "_order"):
				path = "/v1/orders/" + url.PathEscape(args["order_no"].(string)) + "/" + strings.TrimSuffix(c.tool, "_order")
			}
			raw, _ := json.Marshal(body)
			r := s.Do(testenv.Request{Path: path, Token: s.Tokens[testenv.TenantA], Key: key, Body: string(raw)})
			if httpRefuses := r.Status == 400; httpRefuses != mcpRefuses {
				t.Fatalf("the MCP schema refuses: %v; HTTP answered %d %.300s", mcpRefuses, r.Status, r.Body)
			}
		})
	}
}
