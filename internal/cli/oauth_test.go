//go:build !nodev

package cli_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"go.temporal.io/server/temporaltest"
)

// An operator turns OAuth on with flags: 'idemflow serve' and 'idemflow
// mcp --http', each with the issuer, its own resource URI and the tenant
// mapping, and the secret they share. A service agent's token for each
// makes its ticket; idemflow's API tokens are refused where the operator
// turned them off.
func TestServeAndMCPTakeOAuthTokensAsTheirFlagsSay(t *testing.T) {
	pool, dbURL := testenv.Pool(t)
	h := testenv.StartHydra(t, testenv.HydraOptions{})
	ts := temporaltest.NewServer(temporaltest.WithT(t))
	gwAddr, mcpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	base, resource, mcpURL := "http://"+gwAddr, "http://"+gwAddr+"/", "http://"+mcpAddr+"/mcp"
	svc := h.CreateClient(map[string]any{"grant_types": []string{"client_credentials"}, "token_endpoint_auth_method": "client_secret_post",
		"scope": "idemflow:call idemflow:read", "audience": []string{resource, mcpURL}})
	const secret, apiToken = "a-secret-the-gateway-and-mcp-server-share", "tok-oauth-cli-0123456789"
	oauthFlags := func(resource string) []string {
		return []string{"--oauth-issuer", h.Issuer, "--oauth-resource", resource, "--oauth-tenant-claim", "ext.tenant",
			"--oauth-tenants", "client:" + svc.ID + "=" + testenv.TenantA}
	}
	gw := startChild(t, dbURL, "gateway listening", append([]string{"serve", "--temporal-address", ts.GetFrontendHostPort(),
		"--namespace", ts.GetDefaultNamespace(), "--http-addr", gwAddr, "--bootstrap-tokens", testenv.TenantA + ":" + apiToken,
		"--mcp-secret", secret}, oauthFlags(resource)...)...)
	gw.WaitUp(t, time.Minute)
	mcp := startChild(t, dbURL, "MCP over streamable HTTP", append([]string{"mcp", "--http", mcpAddr, "--url", base,
		"--gateway-secret", secret, "--api-tokens=false"}, oauthFlags(mcpURL)...)...)
	mcp.WaitUp(t, time.Minute)

	meta, err := testenv.Send(base, testenv.Request{Method: http.MethodGet, Path: "/.well-known/oauth-protected-resource"})
	if err != nil || meta.Status != http.StatusOK {
		t.Fatalf("the gateway's metadata: %v %d", err, meta.Status)
	}
	gwToken := h.ClientCredentials(svc, resource, "idemflow:call idemflow:read")
	r := testenv.Do(t, base, testenv.Request{Path: "/v1/tickets", Token: gwToken, Key: "cli-oauth-1", Body: `{"customer_id":"c-cli-oauth","title":"t"}`})
	if r.Status != http.StatusCreated {
		t.Fatalf("the gateway with an OAuth token: %d %s", r.Status, r.Body)
	}
	// The API token still works at the gateway; the MCP server refuses it.
	if r := testenv.Do(t, base, testenv.Request{Method: http.MethodGet, Path: "/v1/tenant", Token: apiToken}); r.Status != http.StatusOK {
		t.Fatalf("the gateway with its API token: %d", r.Status)
	}
	if r, err := testenv.Send(mcpURL, testenv.Request{Path: "", Token: apiToken, Body: `{"jsonrpc":"2.0","id":1,"method":"ping"}`}); err != nil || r.Status != http.StatusUnauthorized {
		t.Fatalf("the MCP server with API tokens off, given one: %v %d %s", err, r.Status, r.Body)
	}
	c := testenv.DialMCP(t, mcpURL, h.ClientCredentials(svc, mcpURL, "idemflow:call idemflow:read"))
	res, e := c.Call("tools/call", map[string]any{"name": "create_ticket", "arguments": map[string]any{
		"idempotency_key": "cli-oauth-2", "customer_id": "c-cli-oauth", "title": "t"}})
	if e != nil || res["isError"] == true {
		t.Fatalf("the MCP server with an OAuth token: %+v %+v", res, e)
	}
	if n := testenv.Count(t, pool, "ticket", "customer_id = $1", "c-cli-oauth"); n != 2 {
		t.Fatalf("%d tickets, want 2 (one through each server)", n)
	}
}
