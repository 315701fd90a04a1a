package mcpserver_test

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/idemflow/idemflow/internal/gateway"
	"github.com/idemflow/idemflow/internal/mcpserver"
	"github.com/idemflow/idemflow/internal/oauth"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// The MCP server over HTTP as an OAuth resource server, against a real
// authorization server (Ory Hydra): it describes itself at the
// path-suffixed well-known URI and the root one, names that in every 401,
// accepts only tokens issued for its own URI, refuses a call its token's
// scopes do not cover with 403 before anything runs, never passes a token
// on (the gateway sees only the secret it shares with this server, and
// the tenant the token named), and keeps tenants apart: one tenant's
// token finds nothing of another's task or intent.
func TestTheMCPServerIsAnOAuthResourceServerThatNeverPassesATokenOn(t *testing.T) {
	h := testenv.StartHydra(t, testenv.HydraOptions{})
	const gatewayResource = "https://gateway.idemflow.test/"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mcpURL := "http://" + ln.Addr().String() + "/mcp"
	client := func(scope string) testenv.Client {
		return h.CreateClient(map[string]any{"grant_types": []string{"client_credentials"}, "token_endpoint_auth_method": "client_secret_post",
			"scope": scope, "audience": []string{mcpURL, gatewayResource}})
	}
	svcA, svcB, reader := client("idemflow:call idemflow:read"), client("idemflow:call idemflow:read"), client("idemflow:read")
	v, err := oauth.New(oauth.Config{Issuer: h.Issuer, Resource: mcpURL, TenantClaim: "ext.tenant", Tenants: map[string]string{
		"client:" + svcA.ID: testenv.TenantA, "client:" + svcB.ID: testenv.TenantB, "client:" + reader.ID: testenv.TenantA}})
	if err != nil {
		t.Fatal(err)
	}
	const secret = "the-secret-the-mcp-server-and-gateway-share"
	s := testenv.NewStack(t, testenv.Options{NoWorker: true, Gateway: func(g *gateway.Gateway) { g.MCPSecret = secret }})

	// What reaches the gateway, recorded.
	var mu sync.Mutex
	var seen []string
	target, _ := url.Parse(s.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	recorder := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization")+" | "+r.Header.Get(oauth.HeaderActingTenant))
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(recorder.Close)
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: mcpserver.HTTPHandler(
		mcpserver.Config{BaseURL: recorder.URL, Operations: s.Set.Operations()},
		mcpserver.HTTPOptions{OAuth: v, GatewaySecret: secret})}}
	srv.Start()
	t.Cleanup(srv.Close)
	base := srv.URL

	t.Run("metadata at the path-suffixed and the root well-known URI", func(t *testing.T) {
		for _, path := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
			resp, err := http.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			var meta struct {
				Resource string   `json:"resource"`
				Servers  []string `json:"authorization_servers"`
				Scopes   []string `json:"scopes_supported"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&meta)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || meta.Resource != mcpURL || len(meta.Servers) != 1 || meta.Servers[0] != h.Issuer ||
				!strings.Contains(strings.Join(meta.Scopes, " "), "idemflow:call:create_ticket") {
				t.Fatalf("%s: HTTP %d %+v", path, resp.StatusCode, meta)
			}
		}
	})

	post := func(token string, msg map[string]any, session string) *http.Response {
		b, _ := json.Marshal(msg)
		req, _ := http.NewRequest(http.MethodPost, mcpURL, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	initMsg := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{"protocolVersion": "2025-11-25",
		"capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "raw", "version": "1"}}}

	t.Run("a 401 names the metadata; a token for another resource is refused", func(t *testing.T) {
		resp := post("", initMsg, "")
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `resource_metadata="`+base+`/.well-known/oauth-protected-resource/mcp"`) {
			t.Fatalf("no token: HTTP %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
		forGateway := h.ClientCredentials(svcA, gatewayResource, "idemflow:call")
		resp = post(forGateway, initMsg, "")
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
			t.Fatalf("a token for the gateway, on the MCP server: HTTP %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
	})

	tokA := h.ClientCredentials(svcA, mcpURL, "idemflow:call idemflow:read")
	tokB := h.ClientCredentials(svcB, mcpURL, "idemflow:call idemflow:read")
	t.Run("a call the token's scopes do not cover is a 403 before anything runs", func(t *testing.T) {
		tok := h.ClientCredentials(reader, mcpURL, "idemflow:read")
		init := post(tok, initMsg, "")
		session := init.Header.Get("Mcp-Session-Id")
		resp := post(tok, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": map[string]any{"name": "create_ticket",
			"arguments": map[string]any{"idempotency_key": "oauth-scope", "customer_id": "c-scope", "title": "No"}}}, session)
		challenge := resp.Header.Get("WWW-Authenticate")
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(challenge, `error="insufficient_scope"`) || !strings.Contains(challenge, `scope="idemflow:call:create_ticket"`) {
			t.Fatalf("a read-only token's tools/call: HTTP %d %q", resp.StatusCode, challenge)
		}
		if n := testenv.Count(t, s.Pool, "idempotency_record", ""); n != 0 {
			t.Fatalf("the refused call wrote %d records", n)
		}
		t.Logf("HTTP 403, %s", challenge)
	})

	t.Run("tenant A's task and intent are not found with tenant B's token", func(t *testing.T) {
		a := testenv.DialMCP(t, mcpURL, tokA)
		created, e := a.Call("tools/call", withMeta(map[string]any{"name": "create_ticket", "arguments": map[string]any{
			"idempotency_key": "oauth-task", "customer_id": "c-oauth-task", "title": "Slow ticket"}}, declared))
		if e != nil || created["resultType"] != "task" {
			t.Fatalf("tenant A's call without a worker: %+v %+v", created, e)
		}
		b := testenv.DialMCP(t, mcpURL, tokB)
		if got, e := b.Call("tasks/get", withMeta(map[string]any{"taskId": created["taskId"]}, declared)); e == nil || e.Code != -32602 {
			t.Fatalf("tenant B's tasks/get of A's task: %+v %+v", got, e)
		}
		var opID string
		if err := s.Pool.QueryRow(t.Context(), `SELECT id::text FROM idempotency_record WHERE idem_key = 'oauth-task'`).Scan(&opID); err != nil {
			t.Fatal(err)
		}
		got, e := b.Call("tools/call", map[string]any{"name": "get_operation", "arguments": map[string]any{"operation_id": opID}})
		if r, isErr := toolResult(t, got); e == nil && !isErr {
			t.Fatalf("tenant B's get_operation of A's operation: %+v", r)
		}
		s.StartWorker()
		res, e := a.Call("tools/call", map[string]any{"name": "create_ticket", "arguments": map[string]any{
			"idempotency_key": "oauth-task", "customer_id": "c-oauth-task", "title": "Slow ticket"}})
		if r, isErr := toolResult(t, res); e != nil || isErr || !r.Replayed && r.HTTPStatus != http.StatusCreated {
			t.Fatalf("tenant A's call again, with a worker: %+v %+v", r, e)
		}
		if n := testenv.Count(t, s.Pool, "ticket", "tenant_id = $1", testenv.TenantA); n != 1 {
			t.Fatalf("tenant A has %d tickets, want 1", n)
		}
	})

	t.Run("sessions are bounded per tenant whichever token opens them", func(t *testing.T) {
		bounded := httptest.NewServer(mcpserver.HTTPHandler(mcpserver.Config{BaseURL: recorder.URL, Operations: s.Set.Operations()},
			mcpserver.HTTPOptions{OAuth: v, GatewaySecret: secret, MaxSessionsPerTenant: 2}))
		t.Cleanup(bounded.Close)
		for i := range 2 {
			if code := initialize(t, bounded.URL, tokA); code != http.StatusOK {
				t.Fatalf("session %d of tenant A: %d", i+1, code)
			}
		}
		// Another token of the same tenant counts against the same bound.
		if code := initialize(t, bounded.URL, h.ClientCredentials(svcA, mcpURL, "idemflow:call")); code != http.StatusServiceUnavailable {
			t.Fatalf("a third session of tenant A, with a new token: %d, want 503", code)
		}
		if code := initialize(t, bounded.URL, tokB); code != http.StatusOK {
			t.Fatalf("tenant B, while A is at its bound: %d", code)
		}
		t.Logf("2 sessions of tenant A, the third (a new token) 503; tenant B's opens")
	})

	t.Run("the gateway saw only the shared secret, never a token", func(t *testing.T) {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 {
			t.Fatal("the gateway saw no request")
		}
		for _, got := range seen {
			if got != "Bearer "+secret+" | "+testenv.TenantA && got != "Bearer "+secret+" | "+testenv.TenantB {
				t.Fatalf("the gateway saw %q", got)
			}
		}
		t.Logf("%d requests reached the gateway, each with the shared secret and the token's tenant", len(seen))
	})
}
