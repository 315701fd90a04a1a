package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/httptool"
	"github.com/idemflow/idemflow/internal/mcpserver"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type measureRequest struct {
	Count int64   `json:"count"`
	Ratio float64 `json:"ratio"`
}

// A number I-JSON says cannot be exchanged exactly (an integer beyond
// ±(2^53-1), a value out of a double's range) is a 400 naming its field,
// over HTTP and MCP, for a built-in, a declared operation (JSON Schema
// integer and number) and an HTTP tool, and nothing is recorded: read as a
// double, 9007199254740993 would share a fingerprint with
// 9007199254740992, and 1e400 would fail the fingerprint with a 500.
func TestNumbersThatCannotBeExchangedExactlyAreA400NamingTheField(t *testing.T) {
	measure := op.Define(op.Spec[measureRequest, struct{}]{
		Name: "measure",
		Step: func(context.Context, pgx.Tx, op.In[measureRequest]) (struct{}, error) { return struct{}{}, nil },
		Lookup: func(context.Context, op.Querier, string, string) (struct{}, bool, error) {
			return struct{}{}, false, nil
		},
		View:       func(struct{}) op.Answer { return op.Answer{Body: map[string]string{}} },
		Table:      "measure",
		Migrations: keyedTable("measure"),
	})
	tools, err := httptool.Parse([]byte(`
tools:
  - name: weigh
    description: Weigh something.
    input_schema:
      type: object
      additionalProperties: false
      properties:
        grams: {type: integer}
        ratio: {type: number}
    call: {method: POST, url: "http://127.0.0.1:9/weigh", key_header: Idempotency-Key}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := testenv.NewStack(t, testenv.Options{Operations: []*op.Operation{measure}, Tools: tools, NoWorker: true})
	cs := testenv.MCPSession(t, mcpserver.New(mcpserver.Config{BaseURL: s.URL, Token: s.Tokens[testenv.TenantA],
		Operations: s.Set.Operations()}))
	type target struct {
		route, tool, field string
		body               func(n string) string // the JSON body with the number n in field
		exact              string                // a number that passes
	}
	targets := []target{
		{"/v1/orders", "create_order", "items[0].quantity", func(n string) string {
			return `{"customer_id":"c","items":[{"sku":"SKU-MOUSE","quantity":` + n + `}]}`
		}, "3"},
		{"/v1/measure", "measure", "count", func(n string) string { return `{"count":` + n + `,"ratio":0.5}` }, "9007199254740991"},
		{"/v1/measure", "measure", "ratio", func(n string) string { return `{"count":1,"ratio":` + n + `}` }, "0.1"},
		{"/v1/tools/weigh", "weigh", "grams", func(n string) string { return `{"grams":` + n + `}` }, "-9007199254740991"},
		{"/v1/tools/weigh", "weigh", "ratio", func(n string) string { return `{"ratio":` + n + `}` }, "1.5e-300"},
	}
	for _, tg := range targets {
		for _, n := range []string{"9007199254740993", "9007199254740992", "-9007199254740993", "1e400", "1e-400"} {
			name := tg.route + " " + tg.field + "=" + n
			key := fmt.Sprintf("n-%s-%s-%s", tg.tool, tg.field, n)
			r := s.Do(testenv.Request{Path: tg.route, Token: s.Tokens[testenv.TenantA], Key: key, Body: tg.body(n),
				Header: map[string]string{"Prefer": "wait=0"}})
			var p struct {
				Type   string                           `json:"type"`
				Errors []struct{ Field, Reason string } `json:"errors"`
			}
			_ = json.Unmarshal(r.Body, &p)
			if r.Status != 400 || p.Type != "/problems/invalid-request" || len(p.Errors) != 1 || p.Errors[0].Field != tg.field {
				t.Errorf("%s over HTTP: %d %s", name, r.Status, r.Body)
			}
			var args map[string]any
			dec := json.NewDecoder(strings.NewReader(tg.body(n)))
			dec.UseNumber() // the number goes to the MCP server as written
			if err := dec.Decode(&args); err != nil {
				t.Fatal(err)
			}
			args["idempotency_key"] = key + "-mcp"
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tg.tool, Arguments: args})
			if err != nil {
				t.Fatal(err)
			}
			msg := ""
			for _, c := range res.Content {
				if tc, ok := c.(*mcp.TextContent); ok {
					msg += tc.Text
				}
			}
			if !res.IsError || !strings.Contains(msg, "INVALID ARGUMENTS") || !strings.Contains(msg, tg.field+":") {
				t.Errorf("%s over MCP: %s", name, msg)
			}
		}
		// Exact numbers pass, the largest exact integers included.
		ok := tg.body(tg.exact)
		if r := s.Do(testenv.Request{Path: tg.route, Token: s.Tokens[testenv.TenantA], Key: "ok-" + tg.tool + tg.field, Body: ok,
			Header: map[string]string{"Prefer": "wait=0"}}); r.Status == 400 || r.Status >= 500 {
			t.Errorf("%s %s: %d %s", tg.route, ok, r.Status, r.Body)
		}
	}
	if n := testenv.Count(t, s.Pool, "idempotency_record", "idem_key LIKE 'n-%'"); n != 0 {
		t.Fatalf("refused numbers left %d records", n)
	}
}

// An integer written 1.0 or 1e0 is the integer 1, as JSON Schema and the
// fingerprint read it: the order is created, and the same key with
// quantity 1 is the same request, a replay (Schemathesis sent 1.0 where the
// contract says integer, and got a 400).
func TestAnIntegerWrittenWithAFractionIsTheSameRequest(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	order := func(quantity string) testenv.Response {
		return s.Do(testenv.Request{Method: "POST", Path: "/v1/orders", Key: "int-1", Token: s.Tokens[testenv.TenantA],
			Body: `{"customer_id":"c-1","items":[{"sku":"SKU-MOUSE","quantity":` + quantity + `}]}`})
	}
	first := order("1.0")
	if first.Status != 201 {
		t.Fatalf("quantity 1.0: %d %s", first.Status, first.Body)
	}
	for _, q := range []string{"1", "1e0"} {
		again := order(q)
		if again.Status != 201 || again.Header.Get("Idempotent-Replayed") != "true" || string(again.Body) != string(first.Body) {
			t.Fatalf("quantity %s under the same key: %d replayed=%s %s", q, again.Status, again.Header.Get("Idempotent-Replayed"), again.Body)
		}
	}
	if r := order("1.5"); r.Status != 400 || !strings.Contains(string(r.Body), "items[0].quantity: must be an integer, got 1.5") {
		t.Fatalf("quantity 1.5: %d %s", r.Status, r.Body)
	}
}
