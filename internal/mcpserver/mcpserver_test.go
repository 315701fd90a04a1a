package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/mcpserver"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func inMemory(t *testing.T, s *testenv.Stack) *mcp.ClientSession {
	t.Helper()
	return testenv.MCPSession(t, mcpserver.New(mcpserver.Config{BaseURL: s.URL, Token: s.Tokens[testenv.TenantA], Operations: s.Set.Operations()}))
}

type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

func overHTTP(t *testing.T, s *testenv.Stack, token string) *mcp.ClientSession {
	t.Helper()
	hs := httptest.NewServer(mcpserver.HTTPHandler(mcpserver.Config{BaseURL: s.URL, Operations: s.Set.Operations()}, mcpserver.HTTPOptions{}))
	t.Cleanup(hs.Close)
	tr := &mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}, DisableStandaloneSSE: true}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (*mcp.CallToolResult, mcpserver.Result) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", tool, err)
	}
	var out mcpserver.Result
	if !res.IsError {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: structured content %s: %v", tool, b, err)
		}
	}
	return res, out
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, " ")
}

var ticketArgs = map[string]any{"idempotency_key": "mcp-k1", "customer_id": "c-1", "title": "Model-made ticket", "priority": "high"}

func exercise(t *testing.T, s *testenv.Stack, cs *mcp.ClientSession) {
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if tool.Name != "get_operation" {
			schema, _ := json.Marshal(tool.InputSchema)
			if !strings.Contains(string(schema), `"idempotency_key"`) || !strings.Contains(tool.Description, "SAME key") {
				t.Errorf("%s must require and explain idempotency_key: %s / %s", tool.Name, schema, tool.Description)
			}
		}
	}
	// One tool per operation the gateway serves, and get_operation.
	want := []string{"get_operation"}
	for _, o := range s.Set.Operations() {
		want = append(want, o.Tool)
	}
	sort.Strings(names)
	sort.Strings(want)
	if !slices.Equal(names, want) || !slices.Contains(names, "create_ticket") || !slices.Contains(names, "pay_order") {
		t.Fatalf("tools %v, want %v", names, want)
	}

	first, a := call(t, cs, "create_ticket", ticketArgs)
	second, b := call(t, cs, "create_ticket", ticketArgs)
	if first.IsError || second.IsError || a.HTTPStatus != 201 || a.Replayed || !b.Replayed || !reflect.DeepEqual(a.Result, b.Result) {
		t.Fatalf("create twice: %v %+v / %v %+v (%s)", first.IsError, a, second.IsError, b, text(first))
	}
	if n := testenv.Count(t, s.Pool, "ticket", ""); n != 1 {
		t.Fatalf("%d tickets", n)
	}
	changed := map[string]any{}
	for k, v := range ticketArgs {
		changed[k] = v
	}
	changed["title"] = "Another title"
	res, _ := call(t, cs, "create_ticket", changed)
	if !res.IsError || !strings.Contains(text(res), "CONFLICT") || !strings.Contains(text(res), "mcp-k1") {
		t.Fatalf("changed argument: error=%v %q", res.IsError, text(res))
	}
	if n := testenv.Count(t, s.Pool, "ticket", ""); n != 1 {
		t.Fatalf("%d tickets after the conflict", n)
	}

	// Orders: create, pay, then a cancel from the wrong state names it.
	res, o := call(t, cs, "create_order", map[string]any{"idempotency_key": "mcp-o1", "customer_id": "c-1", "items": []map[string]any{{"sku": "SKU-MOUSE", "quantity": 1}}})
	if res.IsError {
		t.Fatal(text(res))
	}
	var order struct {
		OrderNo string `json:"order_no"`
	}
	order.OrderNo, _ = o.Result["order_no"].(string)
	if res, _ = call(t, cs, "pay_order", map[string]any{"idempotency_key": "mcp-p1", "order_no": order.OrderNo, "payment_ref": "psp-1"}); res.IsError {
		t.Fatal(text(res))
	}
	res, _ = call(t, cs, "cancel_order", map[string]any{"idempotency_key": "mcp-c1", "order_no": order.OrderNo})
	if !res.IsError || !strings.Contains(text(res), "invalid-transition") || !strings.Contains(text(res), "PAID") {
		t.Fatalf("cancel after pay: %q", text(res))
	}
	// Refund and fulfill: one paid order each, and a replay of the refund.
	if res, _ = call(t, cs, "fulfill_order", map[string]any{"idempotency_key": "mcp-f1", "order_no": order.OrderNo}); res.IsError {
		t.Fatal(text(res))
	}
	res, o = call(t, cs, "create_order", map[string]any{"idempotency_key": "mcp-o2", "customer_id": "c-1", "items": []map[string]any{{"sku": "SKU-MOUSE", "quantity": 1}}})
	if res.IsError {
		t.Fatal(text(res))
	}
	secondNo, _ := o.Result["order_no"].(string)
	if res, _ = call(t, cs, "pay_order", map[string]any{"idempotency_key": "mcp-p2", "order_no": secondNo, "payment_ref": "psp-2"}); res.IsError {
		t.Fatal(text(res))
	}
	refund := map[string]any{"idempotency_key": "mcp-r2", "order_no": secondNo, "reason": "changed mind"}
	_, r1 := call(t, cs, "refund_order", refund)
	_, r2 := call(t, cs, "refund_order", refund)
	if r1.Result["to_status"] != "REFUNDED" || r1.Replayed || !r2.Replayed || !reflect.DeepEqual(r1.Result, r2.Result) {
		t.Fatalf("refund twice: %+v / %+v", r1, r2)
	}
	if n := testenv.Count(t, s.Pool, "purchase_order", "status IN ('FULFILLED', 'REFUNDED')"); n != 2 {
		t.Fatalf("%d orders fulfilled or refunded, want 2", n)
	}
	rec, err := s.Records.Get(context.Background(), testenv.TenantA, "mcp-k1")
	if err != nil {
		t.Fatal(err)
	}
	res, op := call(t, cs, "get_operation", map[string]any{"operation_id": rec.ID.String()})
	if res.IsError || op.Result["status"] != "succeeded" {
		t.Fatalf("get_operation: %q %v", text(res), op.Result)
	}
}

func TestMCPInMemory(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	exercise(t, s, inMemory(t, s))
}

func TestMCPOverStreamableHTTP(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	exercise(t, s, overHTTP(t, s, s.Tokens[testenv.TenantA]))
	// The caller's own token decides the tenant: B sees nothing of A's.
	cs := overHTTP(t, s, s.Tokens[testenv.TenantB])
	_, out := call(t, cs, "create_ticket", ticketArgs)
	if out.Replayed || out.HTTPStatus != 201 {
		t.Fatalf("tenant B got a replay of tenant A's intent: %+v", out)
	}
}

// initialize posts an MCP initialize request with token and returns the
// HTTP status.
func initialize(t *testing.T, url, token string) int {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}`
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Reproduced before: an unknown token got 200 on initialize and a session
// that never expired.
func TestMCPOverHTTPRefusesUnknownTokensAndBoundsSessionsPerTenant(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	hs := httptest.NewServer(mcpserver.HTTPHandler(mcpserver.Config{BaseURL: s.URL, Operations: s.Set.Operations()}, mcpserver.HTTPOptions{MaxSessionsPerTenant: 2}))
	t.Cleanup(hs.Close)
	for _, tok := range []string{"", "idf_unknown_token_unknown"} {
		if code := initialize(t, hs.URL, tok); code != http.StatusUnauthorized {
			t.Fatalf("initialize with token %q: %d, want 401", tok, code)
		}
		// The refusal is the problem+json the gateway sends, not text.
		req, _ := http.NewRequest(http.MethodPost, hs.URL, strings.NewReader(`{}`))
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p struct{ Type, Detail string }
		err = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if resp.Header.Get("Content-Type") != "application/problem+json" || err != nil || p.Type != "/problems/unauthorized" || resp.Header.Get("WWW-Authenticate") == "" {
			t.Fatalf("refusal of token %q: %s %v %+v", tok, resp.Header.Get("Content-Type"), err, p)
		}
	}
	for i := range 2 {
		if code := initialize(t, hs.URL, s.Tokens[testenv.TenantA]); code != http.StatusOK {
			t.Fatalf("session %d of A: %d", i+1, code)
		}
	}
	if code := initialize(t, hs.URL, s.Tokens[testenv.TenantA]); code != http.StatusServiceUnavailable {
		t.Fatalf("a third session of A: %d, want 503", code)
	}
	// A's sessions do not exhaust B's.
	if code := initialize(t, hs.URL, s.Tokens[testenv.TenantB]); code != http.StatusOK {
		t.Fatalf("B while A is at its bound: %d", code)
	}
}

func TestMCPIdleSessionsExpire(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	hs := httptest.NewServer(mcpserver.HTTPHandler(mcpserver.Config{BaseURL: s.URL, Operations: s.Set.Operations()}, mcpserver.HTTPOptions{MaxSessionsPerTenant: 1, IdleTimeout: 200 * time.Millisecond}))
	t.Cleanup(hs.Close)
	if code := initialize(t, hs.URL, s.Tokens[testenv.TenantA]); code != http.StatusOK {
		t.Fatalf("first session: %d", code)
	}
	deadline := time.Now().Add(10 * time.Second)
	for initialize(t, hs.URL, s.Tokens[testenv.TenantA]) != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("the idle session never expired")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Tool arguments are decoded by the same strict rules as HTTP bodies
// (I-JSON): a member sent twice is refused, not resolved by "the last one
// wins", and nothing is recorded.
func TestMCPArgumentsAreDecodedAsIJSON(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	cs := inMemory(t, s)
	for _, raw := range []string{
		`{"idempotency_key":"mcp-dup","customer_id":"c-1","title":"first","title":"second"}`,
		`{"idempotency_key":"mcp-dup","idempotency_key":"mcp-dup-2","customer_id":"c-1","title":"t"}`,
	} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_ticket", Arguments: json.RawMessage(raw)})
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || !strings.Contains(text(res), "appears twice") {
			t.Errorf("%s: error=%v %q", raw, res.IsError, text(res))
		}
	}
	if n := testenv.Count(t, s.Pool, "idempotency_record", ""); n != 0 {
		t.Fatalf("%d records written for refused arguments", n)
	}
}

// A call whose final answer has not come within the server's wait
// (CallTimeout, `idemflow mcp --call-wait`) is answered NO ANSWER YET,
// which tells the model to call again with the same key and arguments;
// doing that, once the answers get through, gets the first call's
// answer as a replay: one ticket.
func TestMCPNoAnswerYetSaysToCallAgainUnderTheSameKey(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	// Every request reaches the gateway; no answer comes back.
	partition := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, s.URL+r.URL.RequestURI(), r.Body)
		req.Header = r.Header.Clone()
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		<-r.Context().Done()
	}))
	t.Cleanup(partition.CloseClientConnections)
	t.Cleanup(partition.Close)
	cut := testenv.MCPSession(t, mcpserver.New(mcpserver.Config{BaseURL: partition.URL, Token: s.Tokens[testenv.TenantA],
		CallTimeout: 700 * time.Millisecond, Operations: s.Set.Operations()}))
	args := map[string]any{"idempotency_key": "mcp-pending", "customer_id": "c-pending", "title": "Printer on fire"}
	start := time.Now()
	res, err := cut.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_ticket", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("after %s: error=%v %q", took.Round(time.Millisecond), res.IsError, text(res))
	if !res.IsError || !strings.Contains(text(res), "NO ANSWER YET") || !strings.Contains(text(res), `SAME idempotency_key "mcp-pending"`) {
		t.Fatalf("the wait's end: error=%v %q", res.IsError, text(res))
	}
	if took > 10*time.Second {
		t.Fatalf("the call waited %s, past its 700ms wait", took)
	}
	// What the text says: the same key and arguments, again.
	res, err = inMemory(t, s).CallTool(context.Background(), &mcp.CallToolParams{Name: "create_ticket", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || !strings.Contains(text(res), `"replayed":true`) {
		t.Fatalf("called again as told: error=%v %q", res.IsError, text(res))
	}
	if n := testenv.Count(t, s.Pool, "ticket", "customer_id = 'c-pending'"); n != 1 {
		t.Fatalf("%d tickets", n)
	}
}

// A process manager's probe reads HealthPath without a token, even while
// the gateway behind the server does not answer; every other path still
// wants one.
func TestMCPOverHTTPAnswersItsHealthPathWithoutAToken(t *testing.T) {
	hs := httptest.NewServer(mcpserver.HTTPHandler(mcpserver.Config{BaseURL: "http://127.0.0.1:1"}, mcpserver.HTTPOptions{}))
	t.Cleanup(hs.Close)
	for path, want := range map[string]int{mcpserver.HealthPath: http.StatusOK, "/": http.StatusUnauthorized, "/healthz/x": http.StatusUnauthorized} {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without a token: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

// Every tool publishes its intent fields in its _meta (MetaIntent), and a
// call whose wrapper keyed it by them says so (MetaFingerprint): the same
// key with reworded free text is the first answer, a replay that names
// what differed; another customer under it is refused; one ticket.
func TestMCPToolsPublishTheirIntentAndACallKeyedByItReplaysARewording(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	cs := inMemory(t, s)
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	published := map[string]string{}
	for _, tool := range tools.Tools {
		b, _ := json.Marshal(tool.Meta[mcpserver.MetaIntent])
		published[tool.Name] = string(b)
	}
	for name, want := range map[string]string{
		"create_ticket": `[{"name":"customer_id","norm":"id"}]`,
		"create_order":  `[{"name":"customer_id","norm":"id"},{"name":"items","norm":"set"},{"name":"coupon_code","norm":"id"}]`,
		"pay_order":     `[{"name":"order_no","norm":"id"},{"name":"payment_ref","norm":"id"}]`,
		"cancel_order":  `[{"name":"order_no","norm":"id"}]`,
	} {
		if published[name] != want {
			t.Errorf("%s's intent: %s, want %s", name, published[name], want)
		}
	}
	send := func(args map[string]any) (*mcp.CallToolResult, mcpserver.Result) {
		t.Helper()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_ticket", Arguments: args,
			Meta: mcp.Meta{mcpserver.MetaKey: "lg5_reworded", mcpserver.MetaFingerprint: "intent"}})
		if err != nil {
			t.Fatal(err)
		}
		var out mcpserver.Result
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &out)
		return res, out
	}
	_, first := send(map[string]any{"idempotency_key": "model-1", "customer_id": "c-9", "title": "Printer on fire"})
	_, again := send(map[string]any{"idempotency_key": "model-2", "customer_id": "c-9", "title": "The printer is smoking"})
	if first.HTTPStatus != 201 || first.Replayed || again.HTTPStatus != 201 || !again.Replayed ||
		fmt.Sprint(again.Result) != fmt.Sprint(first.Result) || fmt.Sprint(again.Differed) != "[title]" || !strings.Contains(again.Note, "already done") {
		t.Fatalf("first %+v, reworded %+v", first, again)
	}
	res, _ := send(map[string]any{"idempotency_key": "model-3", "customer_id": "c-10", "title": "Printer on fire"})
	if !res.IsError || !strings.Contains(text(res), "CONFLICT: idempotency_key \"lg5_reworded\" was already used with different arguments") {
		t.Fatalf("another customer: %s", text(res))
	}
	if n := testenv.Count(t, s.Pool, "ticket", ""); n != 1 {
		t.Fatalf("%d tickets", n)
	}
}
